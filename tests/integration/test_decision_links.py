"""One-tap decision links (jobs/actions/links.py): signed, bound to one request and one behaviour, dead once the
request is decided or expired; deciding through one records decided_via=link."""

from datetime import timedelta
from urllib.parse import unquote

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.core.errors import Conflict, InvalidInput
from jobs.models import PermissionRequest
from tests.support import make_task

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pending(work_root, settings) -> PermissionRequest:
    settings.BRIDGE_PUBLIC_URL = "https://bridge.example.test:9000"
    task = make_task("x")
    return actions.record_permission_request(task, request_id="r1", tool_name="Bash", tool_input={"command": "ls"})


def token_of(url: str) -> str:
    return unquote(url.rsplit("/", 1)[-1])


def test_a_pending_request_has_an_allow_and_a_deny_link_on_bridges_public_address(pending):
    links = actions.decision_links(pending)
    assert sorted(links) == ["allow", "deny"]
    assert all(url.startswith("https://bridge.example.test:9000/decide/") for url in links.values())
    assert actions.read_link(token_of(links["deny"])).behavior == "deny"


def test_a_link_decides_once_and_then_says_how_the_request_was_decided(pending):
    token = token_of(actions.decision_links(pending)["allow"])
    decided = actions.decide_by_link(token, by="phone")
    assert (decided.status, decided.decided_via, decided.decided_by) == ("allowed", "link", "phone")
    with pytest.raises(Conflict, match="already allowed via link by phone; the link decides nothing more"):
        actions.decide_by_link(actions.link_token(pending, "deny"))
    assert actions.decision_links(PermissionRequest.objects.get(pk=pending.pk)) == {}


def test_an_expired_request_s_link_decides_nothing(pending):
    PermissionRequest.objects.filter(pk=pending.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(Conflict, match="expired"):
        actions.decide_by_link(actions.link_token(pending, "allow"))
    assert PermissionRequest.objects.get(pk=pending.pk).status == "pending"


@hypothesis_settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # the request is only read
@given(st.integers(min_value=0, max_value=200), st.text(min_size=1, max_size=3))
def test_a_changed_or_forged_token_is_refused(pending, cut, extra):
    token = actions.link_token(pending, "allow")
    for forged in (token[: cut % len(token)], token + extra, token.replace(":", ":" + extra, 1)):
        if forged == token:
            continue
        with pytest.raises(InvalidInput, match="not one Bridge made"):
            actions.read_link(forged)
