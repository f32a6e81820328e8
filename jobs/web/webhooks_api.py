"""REST for webhooks (/v1/webhooks): make, list, remove and test them, and read each one's delivery log, over
jobs.actions.webhooks. Mounted on the API by jobs/web/api.py (by name, so that module need not import this one), whose
auth, error shapes and query check every operation here shares.

Scopes: reading needs `read`; making, removing and testing need `decide`, because a webhook is sent every decision
link of the tasks it covers (`permission.requested`), which lets whoever reads it decide; so is the power to point
Bridge at a receiver. A token limited to roots makes, sees and removes only webhooks whose root lies under them.
"""

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Path, Query, Router, Schema
from pydantic import StrictStr

from jobs import actions
from jobs.actions.webhooks import FORMATS, MAX_URL_CHARS
from jobs.core.access import Scope
from jobs.core.inputs import MAX_INT
from jobs.models import Webhook, WebhookDelivery
from jobs.web.api import (
    COMMON_ERRORS,
    NEEDS_DECIDE,
    NEEDS_READ,
    READ_ONE,
    Strict,
    TaskAgent,
    TaskCreator,
    TaskRoot,
    answers,
    caller,
)

router = Router(tags=["webhooks"])

EVENT_WORDS = Literal[Webhook.EVENTS]  # type: ignore[valid-type]
WebhookId = Path(..., ge=1, le=MAX_INT, description="The id a create answered with (GET /v1/webhooks lists them).")


class WebhookIn(Strict):
    url: StrictStr = Field(
        min_length=1,
        max_length=MAX_URL_CHARS,
        description="Where deliveries are POSTed: http or https, to a host BRIDGE_WEBHOOK_HOSTS allows (by default "
        "127.0.0.1, localhost, ::1); no user name, password or #fragment.",
    )
    events: list[EVENT_WORDS] | None = Field(
        None,
        min_length=1,
        max_length=len(Webhook.EVENTS),
        description="What it is told of: task.started, permission.requested (with Allow and Deny links), "
        "permission.decided, task.finished (with the final status, result and cost). Default: all four.",
    )
    root: TaskRoot = ""
    agent: TaskAgent = ""
    created_for: TaskCreator = ""
    format: Literal[FORMATS] = Field(  # type: ignore[valid-type]
        "bridge",
        description="bridge: Bridge's JSON; slack, discord: the JSON their incoming webhooks take; ntfy: a message "
        "with Allow and Deny buttons.",
    )


class DeliveryStatsOut(Schema):
    pending: int
    delivered: int
    failed: int
    last_delivered_at: datetime | None
    last_failure: dict[str, Any] | None = Field(description="The newest failed delivery: its id, error, status code.")


class WebhookOut(Schema):
    id: int
    url: str = Field(description="Whole for a caller with scope decide; else only its scheme and host.")
    events: list[str]
    root: str
    agent: str
    created_for: str
    format: str
    created_by: str
    created_at: datetime
    removed_at: datetime | None
    removed_by: str
    live: bool
    deliveries: DeliveryStatsOut | None = None


class WebhookCreatedOut(WebhookOut):
    secret: str = Field(
        description="The key of X-Bridge-Signature, shown this once: keep it where the receiver checks signatures."
    )


class WebhookListOut(Schema):
    webhooks: list[WebhookOut]


class TestOut(Schema):
    webhook_id: int
    delivery_id: str = Field(description="The ping's id: GET /v1/webhooks/<id>/deliveries shows how it went.")


class DeliveryOut(Schema):
    delivery_id: str = Field(description="The same on every try (X-Bridge-Delivery).")
    event: str
    task_id: str | None
    status: Literal[tuple(WebhookDelivery.Status.values)]  # type: ignore[valid-type]
    attempts: int
    next_attempt_at: datetime | None = Field(description="Pending: when it is tried next.")
    last_status_code: int | None
    last_error: str
    created_at: datetime
    delivered_at: datetime | None
    payload: dict[str, Any] = Field(description="Bridge's JSON as it was enqueued (decision links are added as sent).")


class DeliveriesOut(Schema):
    webhook_id: int
    deliveries: list[DeliveryOut]


def shown(request: HttpRequest, webhook: Webhook, stats: dict | None = None) -> dict:
    return actions.webhook_data(webhook, stats, full_url=caller(request).has(Scope.DECIDE))


@router.post(
    "", auth=NEEDS_DECIDE, response=answers(WebhookCreatedOut, COMMON_ERRORS | {409, 413}), summary="Add a webhook"
)
def create_webhook(request: HttpRequest, payload: WebhookIn):
    """Bridge POSTs each event the webhook asks for, signed with its secret (answered this once), and retries with
    backoff until the receiver takes it. 400 names what is wrong: a URL that is not http(s), a host
    BRIDGE_WEBHOOK_HOSTS does not allow, a root outside the allowed roots."""
    who = caller(request)
    fields = payload.model_dump()
    webhook, secret = actions.create_webhook(fields.pop("url"), **fields, by=who.name, caller=who)
    return {**shown(request, webhook), "secret": secret}


@router.get("", auth=NEEDS_READ, response=answers(WebhookListOut, COMMON_ERRORS), summary="List the webhooks")
def list_webhooks(request: HttpRequest, all: bool = Query(False, description="Removed webhooks too.")):
    """Each webhook with its deliveries so far: how many are pending, delivered and failed, and the newest failure."""
    webhooks = actions.list_webhooks(caller(request), include_removed=all)
    stats = actions.delivery_stats(webhooks)
    return {"webhooks": [shown(request, webhook, stats[webhook.pk]) for webhook in webhooks]}


@router.delete("/{webhook_id}", auth=NEEDS_DECIDE, response=answers(WebhookOut, READ_ONE), summary="Remove a webhook")
def remove_webhook(request: HttpRequest, webhook_id: int = WebhookId):
    """Nothing more is sent to it, and what it was still owed is given up; it stays listed with ?all=1."""
    who = caller(request)
    return shown(request, actions.remove_webhook(webhook_id, by=who.name, caller=who))


@router.post(
    "/{webhook_id}/test",
    auth=NEEDS_DECIDE,
    response=answers(TestOut, READ_ONE | {409}),
    summary="Send a webhook a test delivery",
)
def test_webhook(request: HttpRequest, webhook_id: int = WebhookId):
    """Enqueues a `ping` delivery, sent, signed and retried like any other; answers its id."""
    delivery = actions.send_test(webhook_id, caller(request))
    return {"webhook_id": webhook_id, "delivery_id": str(delivery.delivery_id)}


@router.get(
    "/{webhook_id}/deliveries",
    auth=NEEDS_READ,
    response=answers(DeliveriesOut, READ_ONE),
    summary="A webhook's delivery log, newest first",
)
def webhook_deliveries(
    request: HttpRequest,
    webhook_id: int = WebhookId,
    status: Literal[tuple(WebhookDelivery.Status.values)] | None = Query(None),  # type: ignore[valid-type]
    limit: int = Query(50, ge=1, le=500),
):
    """Each delivery's event, status, tries, next try, last answer or error, and the payload as enqueued."""
    webhook = actions.get_webhook(webhook_id, caller(request))
    deliveries = actions.list_deliveries(webhook, status, limit)
    return {"webhook_id": webhook.pk, "deliveries": [actions.delivery_data(d) for d in deliveries]}
