"""The webhooks page (/webhooks/): each webhook with its delivery log, read through the same actions as REST; the
URL whole only for a caller who may decide, and a token limited to roots sees only the webhooks under them."""

import html

import pytest
from django.test import Client

from jobs import actions
from jobs.core.access import Scope
from jobs.models import WebhookDelivery

pytestmark = pytest.mark.django_db(transaction=True)
SECRET_PATH = "/hook/T0KEN-in-the-path"


def bearer(scope: Scope, *roots) -> dict:
    token = actions.create_token(f"{scope}-{len(roots)}", scope, [str(root) for root in roots])[1]
    return {"Authorization": f"Bearer {token}"}


def text_of(response) -> str:
    assert response.status_code == 200, response.status_code
    return html.unescape(response.content.decode())


def test_the_page_needs_a_login():
    response = Client().get("/webhooks/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_each_webhook_shows_its_deliveries_with_their_status_tries_and_last_error(browser, work_root):
    hook, _ = actions.create_webhook(f"http://127.0.0.1:9{SECRET_PATH}", by="user:alice")
    failed = actions.send_test(hook.pk)
    WebhookDelivery.objects.filter(pk=failed.pk).update(
        status=WebhookDelivery.Status.FAILED, attempts=4, last_status_code=500, last_error="HTTP 500: boom"
    )
    pending = actions.send_test(hook.pk)
    page = text_of(browser.get("/webhooks/"))
    assert SECRET_PATH in page and f'id="delivery-{failed.delivery_id}"' in page and "HTTP 500" in page
    assert "HTTP 500: boom" in page and f'id="delivery-{pending.delivery_id}"' in page
    assert "1 pending · 1 failed" in page


def test_a_caller_who_may_not_decide_sees_only_the_origin_and_a_limited_token_only_its_roots(browser, rooms):
    mine, theirs = rooms
    actions.create_webhook(f"http://127.0.0.1:9{SECRET_PATH}", root=str(mine))
    actions.create_webhook("http://127.0.0.1:9/elsewhere", root=str(theirs))
    read = text_of(browser.get("/webhooks/", headers=bearer(Scope.READ)))
    assert "http://127.0.0.1:9/…" in read and SECRET_PATH not in read
    limited = text_of(browser.get("/webhooks/", headers=bearer(Scope.DECIDE, mine)))
    assert SECRET_PATH in limited and "/elsewhere" not in limited
