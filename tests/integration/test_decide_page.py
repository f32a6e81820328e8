"""The one-tap decision pages (jobs/web/decisions.py) through Django's test client: a decision link's page needs no
login and never decides when opened; its form decides once (decided_via=link), CSRF-checked, and the task's run gets
the answer; a forged, cut, answered or expired link is a page that says why and shows nothing else; the pages are
never cached, never indexed or framed, their address never sent as a Referer; and /decide/ lists what waits, by the
caller's scope and roots."""

import html
import re
from datetime import timedelta
from urllib.parse import quote, unquote

import pytest
from django.core import signing
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.actions.links import SALT
from jobs.actions.permissions import MAX_MESSAGE_CHARS
from jobs.core.access import Scope
from jobs.core.vocabulary import Status
from jobs.models import PermissionRequest, Task
from tests.support import has_event, make_task, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

COMMAND = "touch allowed-by-link.txt"
CSRF_INPUT = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
FORM_ACTION = re.compile(r'<form method="post" action="(/decide/[^"]+)"')


@pytest.fixture(autouse=True)
def confined(work_root) -> None:
    """Every task here runs in the allowed root."""


def asking(command: str = COMMAND, prompt: str = "", **task_fields) -> tuple[Task, PermissionRequest]:
    """A task whose executor asks to run `command`, recorded as a run records it."""
    task = make_task(prompt or f"ask Bash {command}", **task_fields)
    perm = actions.record_permission_request(task, request_id="r1", tool_name="Bash", tool_input={"command": command})
    return task, perm


def path_of(perm: PermissionRequest, behavior: str) -> str:
    """The path of one of a request's decision links, as its notification carries it."""
    return "/decide/" + actions.decision_links(perm)[behavior].rsplit("/decide/", 1)[1]


def opened(client: Client, path: str) -> str:
    """Open a link's page as a browser does, for the CSRF token its form carries."""
    page = client.get(path)
    assert page.status_code == 200, page.content.decode()[:2000]
    return CSRF_INPUT.search(page.content.decode()).group(1)


def decide(client: Client, path: str, **fields):
    """Press the page's button: the form's POST, with the token the page was given."""
    return client.post(path, {"csrfmiddlewaretoken": opened(client, path), **fields})


def status_of(perm: PermissionRequest) -> str:
    return PermissionRequest.objects.get(pk=perm.pk).status


def text_of(response) -> str:
    return html.unescape(response.content.decode())


# --- a link's page: no login, opening decides nothing ---------------------------------------------------------------


def test_a_link_opens_without_a_login_and_shows_what_is_asked(work_root):
    task, perm = asking(prompt="Tidy up the build directory, then " + "report " * 100)
    page = Client().get(path_of(perm, "allow"))
    shown = text_of(page)
    assert page.status_code == 200
    facts = (str(task.public_id), f"/tasks/{task.public_id}/", str(work_root), "Bash", f'"command": "{COMMAND}"')
    for fact in (*facts, "Tidy up the build directory, then report", "Expires"):
        assert fact in shown, fact
    assert "report " * 60 not in shown, "only the prompt's head"
    assert 'id="decide-confirm"' in shown and ">Allow<" in shown and 'name="message"' not in shown


def test_a_deny_link_offers_deny_with_a_message_box():
    _, perm = asking()
    shown = text_of(Client().get(path_of(perm, "deny")))
    assert ">Deny<" in shown and 'name="message"' in shown and ">Allow<" not in shown


@given(st.lists(st.sampled_from(["GET", "HEAD"]), min_size=1, max_size=6), st.sampled_from(["allow", "deny"]))
@hypothesis_settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_opening_a_link_any_number_of_times_never_decides(work_root, methods, behavior):
    _, perm = asking()
    preview = Client(HTTP_USER_AGENT="Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)")
    for method in methods:
        response = preview.generic(method, path_of(perm, behavior))
        assert response.status_code == 200
    assert status_of(perm) == "pending"


def test_a_long_input_is_cut_to_a_length_a_phone_shows():
    _, perm = asking("echo " + "y" * 20_000)
    shown = text_of(Client().get(path_of(perm, "allow")))
    assert "y" * 3000 in shown and "y" * 5000 not in shown
    assert re.search(r"… \(\d+ more characters\)", shown)


# --- deciding: the form, once -------------------------------------------------------------------------------------


def test_the_allow_button_decides_via_link_and_the_run_goes_on(supervisor, work_root):
    task = make_task(f'ask Bash {{"command": "{COMMAND}"}}\nsay done')
    wait_for(task, has_event("permission_request"))
    [perm] = actions.pending_permissions(task)
    response = decide(Client(enforce_csrf_checks=True), path_of(perm, "allow"))
    assert response.status_code == 200 and 'id="decide-outcome"' in text_of(response)
    decided = PermissionRequest.objects.get(pk=perm.pk)
    assert (decided.status, decided.decided_via, decided.decided_by) == ("allowed", "link", "link")
    assert wait_for(task).status == Status.DONE
    assert (work_root / "allowed-by-link.txt").exists(), "the agent ran the tool it was allowed"
    assert PermissionRequest.objects.get(pk=perm.pk).delivered_at is not None


def test_a_second_press_says_the_request_was_already_decided_and_how():
    _, perm = asking()
    client = Client()
    allow = path_of(perm, "allow")
    deny = path_of(perm, "deny")
    opened_before = client.get(deny)  # the deny link's page was open before Allow was pressed
    assert opened_before.status_code == 200
    assert decide(client, allow).status_code == 200
    csrf = CSRF_INPUT.search(opened_before.content.decode()).group(1)
    for path in (allow, deny):
        again = client.post(path, {"csrfmiddlewaretoken": csrf})
        assert again.status_code == 409, path
        assert "already allowed via link; the link decides nothing more" in text_of(again)
        assert client.get(path).status_code == 409
    assert status_of(perm) == "allowed"


def test_a_logged_in_person_is_recorded_by_name(user):
    _, perm = asking()
    client = Client()
    client.force_login(user)
    assert decide(client, path_of(perm, "deny")).status_code == 200
    decided = PermissionRequest.objects.get(pk=perm.pk)
    assert (decided.status, decided.decided_via, decided.decided_by) == ("denied", "link", "user:alice")


@given(st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=200))
@hypothesis_settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_deny_link_tells_the_agent_the_message_typed(work_root, message):
    _, perm = asking()
    response = decide(Client(), path_of(perm, "deny"), message=message)
    assert response.status_code == 200
    assert PermissionRequest.objects.get(pk=perm.pk).message == message.replace("\r\n", "\n")


def test_a_message_too_long_is_refused_on_the_form_which_keeps_it():
    _, perm = asking()
    message = "why " * (MAX_MESSAGE_CHARS // 4 + 1)
    response = decide(Client(), path_of(perm, "deny"), message=message)
    assert response.status_code == 400
    shown = text_of(response)
    assert 'id="decide-error"' in shown and "message" in shown and message.strip() in shown
    assert status_of(perm) == "pending"


def test_a_post_without_the_csrf_token_decides_nothing():
    _, perm = asking()
    client = Client(enforce_csrf_checks=True)
    client.get(path_of(perm, "allow"))  # the cookie is there; the form's token is not sent
    assert client.post(path_of(perm, "allow")).status_code == 403
    assert client.post(path_of(perm, "allow"), {"csrfmiddlewaretoken": "x" * 64}).status_code == 403
    assert status_of(perm) == "pending"


def test_an_expired_request_s_link_says_so_and_decides_nothing():
    _, perm = asking()
    PermissionRequest.objects.filter(pk=perm.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    client = Client()
    for response in (client.get(path_of(perm, "allow")), client.post(path_of(perm, "allow"))):
        assert response.status_code == 409 and "expired" in text_of(response)
        assert 'id="decide-confirm"' not in text_of(response)
    assert status_of(perm) == "pending"


# --- forged and cut links: a page that reveals nothing --------------------------------------------------------------


@pytest.fixture
def refusal_page() -> str:
    """The page a link Bridge never made gets."""
    response = Client().get("/decide/" + quote("not-a-token", safe=""))
    assert response.status_code == 400
    return response.content.decode()


@given(
    cut=st.integers(min_value=0, max_value=500),
    extra=st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), min_size=1, max_size=5),
    other_key=st.text(min_size=1, max_size=20),
    behavior=st.sampled_from(["allow", "deny"]),
)
@hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_forged_or_cut_link_gets_one_page_that_reveals_nothing(refusal_page, cut, extra, other_key, behavior):
    task, perm = asking()
    token = unquote(path_of(perm, behavior).removeprefix("/decide/"))
    forged = [
        token[: cut % len(token)],
        token + extra,
        token.replace(":", ":" + extra, 1),
        token.replace(":", "/", 1),  # a slash, a line break: still a link's page, not a 404
        token[: cut % len(token)] + "\n",
        # signed with another key, naming a request that exists and one that does not
        signing.dumps({"request": perm.pk, "behavior": behavior}, key=other_key, salt=SALT, compress=True),
        signing.dumps({"request": perm.pk + 10_000, "behavior": behavior}, key=other_key, salt=SALT, compress=True),
    ]
    client = Client()
    for candidate in (f for f in forged if f and f != token):
        path = "/decide/" + quote(candidate, safe="")
        for response in (client.get(path), client.post(path, {"message": "x"})):
            assert response.status_code == 400, candidate
            assert response.content.decode() == refusal_page, "the page differs by what the token named"
    assert str(task.public_id) not in refusal_page and COMMAND not in refusal_page
    assert status_of(perm) == "pending"


# --- headers --------------------------------------------------------------------------------------------------------


def test_every_decision_page_is_never_cached_sent_on_indexed_or_framed(user):
    _, perm = asking()
    _, other = asking("ls")
    client = Client()
    logged_in = Client()
    logged_in.force_login(user)
    responses = {
        "link": client.get(path_of(perm, "allow")),
        "head": client.head(path_of(perm, "allow")),
        "outcome": decide(client, path_of(perm, "allow")),
        "answered": client.get(path_of(perm, "allow")),
        "forged": client.get("/decide/forged"),
        "list": logged_in.get("/decide/"),
        "from the list": logged_in.post(path_of(other, "deny"), {"back": "pending"}),
        "list, logged out": client.get("/decide/"),
    }
    for name, response in responses.items():
        assert "no-store" in response["Cache-Control"], name
        assert response["Referrer-Policy"] == "strict-origin", name  # the origin only, never the token
        assert "noindex" in response["X-Robots-Tag"], name
        assert response["X-Frame-Options"] == "DENY", name  # no other site frames the button to have it tapped


# --- /decide/: every pending decision -------------------------------------------------------------------------------


def bearer(scope: Scope, *roots) -> dict:
    token = actions.create_token(f"{scope}-{len(roots)}", scope, [str(root) for root in roots])[1]
    return {"Authorization": f"Bearer {token}"}


def test_the_list_needs_a_login():
    asking()
    response = Client().get("/decide/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_the_list_shows_every_pending_decision_oldest_first_with_buttons_that_decide(user):
    first_task, first = asking("ls first")
    second_task, second = asking("ls second")
    _, decided = asking("ls decided")
    actions.decide_permission(decided.task, behavior="allow", by="tester")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    page = text_of(client.get("/decide/"))
    assert page.index("ls first") < page.index("ls second") and "ls decided" not in page
    actions_shown = FORM_ACTION.findall(page)
    assert actions_shown == [path_of(perm, behavior) for perm in (first, second) for behavior in ("allow", "deny")]
    csrf = CSRF_INPUT.search(page).group(1)
    response = client.post(actions_shown[3], {"csrfmiddlewaretoken": csrf, "back": "pending"})
    assert response.status_code == 302 and response["Location"] == "/decide/"
    after = PermissionRequest.objects.get(pk=second.pk)
    assert (after.status, after.decided_via, after.decided_by) == ("denied", "link", "user:alice")
    page = text_of(client.get("/decide/"))
    assert f"Denied: Bash for task {second_task.public_id}." in page and "ls second" not in page
    assert str(first_task.public_id) in page


def test_a_read_token_sees_the_list_but_gets_no_links(user):
    asking("ls readable")
    client = Client()
    client.force_login(user)
    page = text_of(client.get("/decide/", headers=bearer(Scope.READ)))
    assert "ls readable" in page and 'id="pending-read-only"' in page
    assert not re.search(r"/decide/[^\"\s<]", page), "no link (a token after /decide/): a link is the power to decide"
    page = text_of(client.get("/decide/", headers=bearer(Scope.DECIDE)))
    assert len(FORM_ACTION.findall(page)) == 2


def test_a_token_limited_to_roots_lists_only_its_tasks(rooms, user):
    mine, theirs = rooms
    asking("ls mine", cwd=str(mine))
    asking("ls theirs", cwd=str(theirs))
    client = Client()
    client.force_login(user)
    page = text_of(client.get("/decide/", headers=bearer(Scope.DECIDE, mine)))
    assert "ls mine" in page and "ls theirs" not in page and len(FORM_ACTION.findall(page)) == 2
