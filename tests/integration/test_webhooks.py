"""Webhooks (jobs/actions/webhooks.py, jobs/supervision/deliveries.py): deliveries are rows written with the events
they tell of, sent by each supervisor's delivery loop to receivers on 127.0.0.1 in this process, signed, retried
until taken, never to a host BRIDGE_WEBHOOK_HOSTS does not allow, never after a redirect; REST makes and lists them."""

import hashlib
import hmac
import json
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs import actions
from jobs.core.access import Scope
from jobs.core.errors import InvalidInput
from jobs.core.vocabulary import Status
from jobs.models import Task, Webhook, WebhookDelivery
from jobs.supervision.supervisor import Supervisor
from tests.support import at_once, make_task, wait_for, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# The snippet the README shows receivers (keep the two the same): it must accept what Bridge signs, and nothing else.
README_VERIFY = '''
import hashlib, hmac, time

def verify(secret: str, header: str, body: bytes, tolerance_s: int = 300) -> bool:
    """True if `body` (the raw request body) was signed by Bridge with `secret` in the last `tolerance_s` seconds."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return abs(time.time() - timestamp) <= tolerance_s and hmac.compare_digest(expected, fields.get("v1", ""))
'''
_snippet: dict = {}
exec(README_VERIFY, _snippet)
verify: Callable[..., bool] = _snippet["verify"]


# --- a receiver on 127.0.0.1 -------------------------------------------------------------------------------------


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.time)

    @property
    def json(self) -> dict:
        return json.loads(self.body)

    @property
    def delivery_id(self) -> str:
        return self.headers["X-Bridge-Delivery"]


class Receiver:
    """An HTTP server on 127.0.0.1 in this process: every POST is put on `got` as it arrives; it answers `answers`
    in order (then 200), with `headers`, after `hold` is set when one is given (a receiver that never answers)."""

    def __init__(self, port: int = 0, answers: tuple[int, ...] = (), headers: dict | None = None, hold=None):
        self.got: queue.Queue[Received] = queue.Queue()
        self.answers, self.headers, self.hold = list(answers), headers or {}, hold
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.got.put(Received(self.path, dict(self.headers.items()), body))
                if receiver.hold is not None:
                    receiver.hold.wait(60)
                self.send_response(receiver.answers.pop(0) if receiver.answers else 200)
                for name, value in receiver.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST  # a redirect followed as a GET arrives too

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def next(self, timeout: float = 15) -> Received:
        return self.got.get(timeout=timeout)

    def __enter__(self) -> "Receiver":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    """A port nothing listens on now (a receiver that is down), to start one on later."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_supervisor() -> Iterator[Supervisor]:
    """A supervisor in this process, as the `supervisor` fixture runs one, that a test can stop and start again."""
    sup = Supervisor()
    thread = threading.Thread(target=sup.run, daemon=True)
    thread.start()
    assert sup.ready.wait(10), "the supervisor did not start"
    try:
        yield sup
    finally:
        sup.request_stop()
        thread.join(30)
        assert not thread.is_alive(), "the supervisor did not stop"


def webhook_to(url: str, **fields) -> tuple[Webhook, str]:
    return actions.create_webhook(url, by="tester", **fields)


def delivered(count: int) -> Callable[[], bool]:
    return lambda: WebhookDelivery.objects.filter(status=WebhookDelivery.Status.DELIVERED).count() == count


def row(delivery_id: str) -> WebhookDelivery:
    return WebhookDelivery.objects.get(delivery_id=delivery_id)


def ask(command: str) -> str:
    return "ask Bash " + json.dumps({"command": command})


@pytest.fixture
def quick_retries(settings) -> None:
    """Retries a test can wait for: backoff from 10 ms, tries bounded by 5 s."""
    settings.BRIDGE_WEBHOOK_BACKOFF_S = 0.01
    settings.BRIDGE_WEBHOOK_TIMEOUT_S = 5


# --- signed, retried, never lost ----------------------------------------------------------------------------------


def test_a_delivery_carries_a_signature_the_readme_snippet_verifies(supervisor):
    with Receiver() as receiver:
        webhook, secret = webhook_to(receiver.url())
        ping = actions.send_test(webhook.pk)
        got = receiver.next()
    assert (got.headers["X-Bridge-Event"], got.delivery_id) == ("ping", str(ping.delivery_id))
    assert got.json["delivery_id"] == str(ping.delivery_id)
    header = got.headers["X-Bridge-Signature"]
    assert verify(secret, header, got.body)
    assert not verify(secret, header, got.body + b" "), "a changed body"
    assert not verify("another secret", header, got.body)
    stamp, digest = header.split(",")
    old = int(stamp.removeprefix("t=")) - 600
    resigned = hmac.new(secret.encode(), f"{old}.".encode() + got.body, hashlib.sha256).hexdigest()
    assert verify(secret, f"t={old},v1={resigned}", got.body, tolerance_s=700)
    assert not verify(secret, f"t={old},v1={resigned}", got.body), "a delivery replayed ten minutes on"


def test_a_receiver_answering_500_three_times_gets_it_on_the_fourth_try_with_the_same_delivery_id(
    supervisor, quick_retries
):
    with Receiver(answers=(500, 502, 503)) as receiver:
        webhook, _ = webhook_to(receiver.url())
        ping = actions.send_test(webhook.pk)
        tries = [receiver.next() for _ in range(4)]
        wait_until(delivered(1), what="the fourth try recorded")
    assert {got.delivery_id for got in tries} == {str(ping.delivery_id)}
    done = row(str(ping.delivery_id))
    assert (done.status, done.attempts, done.last_status_code, done.last_error) == ("delivered", 4, 200, "")
    assert receiver.got.empty(), "nothing after it was taken"


def test_deliveries_written_while_the_receiver_is_down_arrive_once_it_is_up_exactly_once(supervisor, quick_retries):
    port = free_port()
    webhook, _ = webhook_to(f"http://127.0.0.1:{port}/hook")
    pings = {str(actions.send_test(webhook.pk).delivery_id) for _ in range(5)}
    wait_until(lambda: WebhookDelivery.objects.filter(attempts__gte=1).exists(), what="a try that failed")
    assert "could not connect" in WebhookDelivery.objects.filter(attempts__gte=1).first().last_error
    with Receiver(port=port) as receiver:
        arrived = [receiver.next().delivery_id for _ in pings]
        wait_until(delivered(len(pings)), what="every delivery recorded")
    assert sorted(arrived) == sorted(pings), "each once"
    assert receiver.got.empty()


def test_a_restart_with_pending_deliveries_loses_none(work_root, fake_agent, quick_retries):
    port = free_port()
    webhook, _ = webhook_to(f"http://127.0.0.1:{port}/hook")
    with running_supervisor():
        pings = {str(actions.send_test(webhook.pk).delivery_id) for _ in range(5)}
        wait_until(lambda: WebhookDelivery.objects.filter(attempts__gte=1).exists(), what="a try that failed")
    assert WebhookDelivery.objects.pending().count() == len(pings)
    with Receiver(port=port) as receiver, running_supervisor():
        arrived = [receiver.next().delivery_id for _ in pings]
        wait_until(delivered(len(pings)), what="every delivery recorded")
    assert sorted(arrived) == sorted(pings)
    assert receiver.got.empty()


def test_a_try_under_way_when_its_supervisor_stops_is_handed_back_and_sent_again_by_the_next(
    work_root, fake_agent, quick_retries
):
    hold = threading.Event()
    with Receiver(hold=hold) as stuck:
        webhook, _ = webhook_to(stuck.url())
        with running_supervisor():
            ping = actions.send_test(webhook.pk)
            assert stuck.next().delivery_id == str(ping.delivery_id)
        handed_back = row(str(ping.delivery_id))
        assert (handed_back.status, handed_back.lease) == ("pending", None), "not left to its lease"
        Webhook.objects.filter(pk=webhook.pk).update(url=stuck.url("/again"))
        hold.set()
        with running_supervisor():
            again = stuck.next()
            wait_until(delivered(1), what="the second try recorded")
    assert (again.path, again.delivery_id) == ("/again", str(ping.delivery_id)), "the same delivery, by its id"


def test_a_receiver_that_never_answers_does_not_delay_another_webhooks_delivery(supervisor, settings):
    settings.BRIDGE_WEBHOOK_TIMEOUT_S = 30
    hold = threading.Event()
    with Receiver(hold=hold) as stuck, Receiver() as fine:
        stuck_hook, _ = webhook_to(stuck.url())
        fine_hook, _ = webhook_to(fine.url())
        first = actions.send_test(stuck_hook.pk)
        assert stuck.next().delivery_id == str(first.delivery_id)
        actions.send_test(stuck_hook.pk)  # waits behind the first: one try at a time per webhook
        pings = [actions.send_test(fine_hook.pk) for _ in range(3)]
        arrived = [fine.next(timeout=10).delivery_id for _ in pings]
        assert not hold.is_set() and stuck.got.empty(), "all the while, the first receiver had not answered"
    assert arrived == [str(ping.delivery_id) for ping in pings], "in the order they were made"


def test_a_host_the_setting_does_not_allow_is_refused_when_the_webhook_is_made(work_root, settings):
    with pytest.raises(InvalidInput, match=r"10\.1\.2\.3.*BRIDGE_WEBHOOK_HOSTS"):
        webhook_to("http://10.1.2.3:8080/hook")
    settings.BRIDGE_WEBHOOK_HOSTS = ["::1"]
    with pytest.raises(InvalidInput, match=r"'localhost' resolves to 127\.0\.0\.1, which BRIDGE_WEBHOOK_HOSTS"):
        webhook_to("http://localhost:8080/hook")
    assert not Webhook.objects.exists()


def test_a_name_that_resolves_to_an_address_no_longer_allowed_is_not_sent_to(supervisor, settings):
    with Receiver() as receiver:
        webhook, _ = webhook_to(receiver.url(host="localhost"))
        settings.BRIDGE_WEBHOOK_HOSTS = ["::1", "192.0.2.0/24"]  # localhost still resolves to 127.0.0.1
        ping = actions.send_test(webhook.pk)
        wait_until(lambda: row(str(ping.delivery_id)).status != "pending", what="the delivery refused")
        refused = row(str(ping.delivery_id))
        assert receiver.got.empty()
    assert (refused.status, refused.attempts) == ("failed", 1)
    assert "'localhost' resolves to 127.0.0.1, which BRIDGE_WEBHOOK_HOSTS" in refused.last_error


def test_a_redirect_is_not_followed(supervisor):
    with Receiver() as elsewhere, Receiver(answers=(302,), headers={"Location": ""}) as redirecting:
        redirecting.headers["Location"] = elsewhere.url("/elsewhere")
        webhook, _ = webhook_to(redirecting.url())
        ping = actions.send_test(webhook.pk)
        redirecting.next()
        wait_until(lambda: row(str(ping.delivery_id)).status != "pending", what="the redirect recorded")
        assert elsewhere.got.empty(), "never followed"
    failed = row(str(ping.delivery_id))
    assert (failed.status, failed.attempts, failed.last_status_code) == ("failed", 1, 302)
    assert f"a redirect to {elsewhere.url('/elsewhere')}, which Bridge does not follow" in failed.last_error


def test_a_receiver_refusing_with_a_4xx_is_not_tried_again(supervisor, quick_retries):
    with Receiver(answers=(410,)) as receiver:
        webhook, _ = webhook_to(receiver.url())
        ping = actions.send_test(webhook.pk)
        receiver.next()
        wait_until(lambda: row(str(ping.delivery_id)).status == "failed", what="the refusal recorded")
    failed = row(str(ping.delivery_id))
    assert (failed.attempts, failed.last_status_code) == (1, 410)
    assert receiver.got.empty()


def test_of_several_claims_at_once_each_row_goes_to_exactly_one(work_root):
    hooks = [webhook_to(f"http://127.0.0.1:9/{n}")[0] for n in range(3)]
    pings = [actions.send_test(hook.pk) for hook in hooks for _ in range(2)]
    won: dict[uuid.UUID, list[str]] = {}

    def claim(lease: uuid.UUID) -> None:
        won[lease] = [str(delivery.delivery_id) for delivery in actions.claim_due(set(), 10, lease)]

    at_once(claim, [uuid.uuid4() for _ in range(8)])
    claimed = [delivery_id for ids in won.values() for delivery_id in ids]
    assert sorted(claimed) == sorted(str(pings[n].delivery_id) for n in (0, 2, 4)), "each webhook's first, once"
    assert actions.claim_due(set(), 10, uuid.uuid4()) == [], "a webhook's next row waits for its first's try"


def test_a_loop_waits_for_a_lease_held_elsewhere_rather_than_for_the_rows_behind_it(work_root):
    """Rows behind a try under way elsewhere are due, but no claim takes them: the next look is due when that lease
    ends (the other process sends the next row itself), or at the soonest retry of another webhook."""
    busy, _ = webhook_to("http://127.0.0.1:9/busy")
    later, _ = webhook_to("http://127.0.0.1:9/later")
    first, behind = actions.send_test(busy.pk), actions.send_test(busy.pk)
    retry = actions.send_test(later.pk)
    now = timezone.now()
    leased_until, retry_at = now + timedelta(seconds=30), now + timedelta(seconds=10)
    WebhookDelivery.objects.filter(pk=first.pk).update(lease=uuid.uuid4(), lease_until=leased_until)
    WebhookDelivery.objects.filter(pk=retry.pk).update(next_attempt_at=retry_at)
    assert actions.claim_due(set(), 10, uuid.uuid4()) == [], f"{behind.delivery_id} waits behind the lease"
    assert actions.next_due_at(set()) == retry_at
    assert actions.next_due_at({later.pk}) == leased_until


def test_two_supervisors_send_each_delivery_once(work_root, fake_agent, quick_retries):
    with Receiver() as first, Receiver() as second:
        hooks = [webhook_to(first.url())[0], webhook_to(second.url())[0]]
        with running_supervisor(), running_supervisor():
            pings = [str(actions.send_test(hooks[n % 2].pk).delivery_id) for n in range(40)]
            arrived = [receiver.next().delivery_id for receiver in (first, second) for _ in range(20)]
            wait_until(delivered(len(pings)), what="every delivery recorded")
        assert first.got.empty() and second.got.empty()
    assert sorted(arrived) == sorted(pings)


# --- what a task tells a webhook -----------------------------------------------------------------------------------


def test_a_task_that_asks_permission_tells_its_receiver_with_links_that_decide_it(supervisor, settings):
    settings.BRIDGE_PUBLIC_URL = "http://bridge.test:8800"
    with Receiver() as receiver:
        _, secret = webhook_to(receiver.url())
        task = make_task(ask("touch decided.txt") + "\nsay done")
        started, requested = receiver.next(), receiver.next()
        assert (started.json["event"], started.json["task"]["status"]) == ("task.started", "running")
        assert requested.json["event"] == "permission.requested"
        links = requested.json["permission"]["links"]
        assert sorted(links) == ["allow", "deny"] and links["allow"].startswith("http://bridge.test:8800/decide/")
        assert requested.json["task"]["url"] == f"http://bridge.test:8800/tasks/{task.public_id}/"
        actions.decide_by_link(unquote(links["allow"].rsplit("/", 1)[1]), by="phone")
        decided, finished = receiver.next(), receiver.next()
    assert (decided.json["event"], decided.json["permission"]["decided_via"]) == ("permission.decided", "link")
    assert wait_for(task).status == Status.DONE
    assert (finished.json["event"], finished.json["task"]["status"]) == ("task.finished", "done")
    assert finished.json["cost_usd"] == Task.objects.get(pk=task.pk).cost_usd is not None
    assert all(verify(secret, got.headers["X-Bridge-Signature"], got.body) for got in (started, requested, finished))
    assert "links" not in row(requested.delivery_id).payload["permission"], "links are never stored"


def test_a_request_a_rule_decides_as_it_comes_is_told_only_as_decided(work_root):
    webhook, _ = webhook_to("http://127.0.0.1:9/hook")
    actions.add_rule("Bash(git status)", "allow")
    task = make_task("x")
    actions.record_permission_request(task, request_id="r1", tool_name="Bash", tool_input={"command": "git status"})
    assert [(d.event, d.payload["permission"]["status"]) for d in webhook.deliveries.all()] == [
        ("permission.decided", "allowed")
    ]


def test_each_webhook_hears_only_the_events_and_tasks_it_asked_for(work_root):
    mine, theirs = work_root / "mine", work_root / "theirs"
    mine.mkdir()
    theirs.mkdir()
    by_root, _ = webhook_to("http://127.0.0.1:9/root", root=str(mine))
    by_agent, _ = webhook_to("http://127.0.0.1:9/agent", agent="hermes", events=["permission.requested"])
    by_creator, _ = webhook_to("http://127.0.0.1:9/creator", created_for="token:ci")
    ends_only, _ = webhook_to("http://127.0.0.1:9/ends", events=["task.finished"])
    for cwd, created_by in ((mine, "token:ci"), (theirs, "user:x")):
        task = make_task("x", cwd=str(cwd), created_by=created_by)
        actions.record_permission_request(task, request_id="r1", tool_name="Read", tool_input={"file_path": "/a"})
        actions.request_cancel(task)
    heard = {hook.pk: [(d.event, d.task.cwd) for d in hook.deliveries.order_by("id")] for hook in Webhook.objects.all()}
    assert heard[by_root.pk] == [("permission.requested", str(mine)), ("task.finished", str(mine))]
    assert heard[by_agent.pk] == []
    assert heard[by_creator.pk] == heard[by_root.pk]
    assert heard[ends_only.pk] == [("task.finished", str(mine)), ("task.finished", str(theirs))]


def test_a_removed_webhook_is_told_nothing_more_and_gives_up_what_it_was_owed(work_root):
    webhook, _ = webhook_to("http://127.0.0.1:9/hook")
    owed = actions.send_test(webhook.pk)
    actions.remove_webhook(webhook.pk, by="tester")
    make_task("x")
    actions.request_cancel(Task.objects.get())
    gone = row(str(owed.delivery_id))
    assert (gone.status, gone.last_error) == ("failed", "the webhook was removed by tester")
    assert webhook.deliveries.count() == 1


def test_an_imported_tasks_history_tells_no_one(work_root):
    webhook_to("http://127.0.0.1:9/hook")
    task = make_task("x")
    Task.objects.filter(pk=task.pk).update(source="imported")
    task.refresh_from_db()
    actions.append_events(task, [("status", {"status": "running"})])
    assert not WebhookDelivery.objects.exists()
    Task.objects.filter(pk=task.pk).update(source="api")
    task.refresh_from_db()
    actions.append_events(task, [("status", {"status": "running"})])
    assert WebhookDelivery.objects.get().event == "task.started"


# --- the hot path ----------------------------------------------------------------------------------------------------


def webhook_queries(captured: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in captured.captured_queries if "jobs_webhook" in query["sql"]]


def test_appending_output_never_looks_at_webhooks_and_a_status_without_webhooks_writes_nothing(work_root):
    task = make_task("x")
    with CaptureQueriesContext(connection) as output:
        actions.append_events(task, [("text", {"text": "hi"}), ("tool_use", {"name": "Bash"})] * 50)
    assert webhook_queries(output) == []
    with CaptureQueriesContext(connection) as status:
        actions.append_events(task, [("text", {"text": "hi"}), ("status", {"status": "running"})])
    assert len(webhook_queries(status)) == 1 and "SELECT" in webhook_queries(status)[0]
    assert not WebhookDelivery.objects.exists()


# --- REST -----------------------------------------------------------------------------------------------------------


def call(token: str, method: str, path: str, body: dict | None = None):
    client = Client(headers={"Authorization": f"Bearer {token}"})
    if method == "get":
        return client.get(path, body or {})
    if method == "delete":
        return client.delete(path)
    return client.post(path, json.dumps(body or {}), content_type="application/json")


@pytest.fixture
def decider(work_root) -> str:
    return actions.create_token("decider", Scope.DECIDE)[1]


def test_rest_makes_a_webhook_answering_its_secret_once_and_lists_it_with_its_deliveries(decider):
    made = call(decider, "post", "/v1/webhooks", {"url": "http://127.0.0.1:9/hook", "format": "ntfy"})
    assert made.status_code == 200, made.content
    body = made.json()
    assert body["secret"] == Webhook.objects.get(pk=body["id"]).secret and len(body["secret"]) == 64
    assert (body["events"], body["format"], body["created_by"]) == (list(Webhook.EVENTS), "ntfy", "token:decider")
    tested = call(decider, "post", f"/v1/webhooks/{body['id']}/test").json()
    listed = call(decider, "get", "/v1/webhooks").json()["webhooks"]
    assert [(hook["id"], hook["url"], hook["deliveries"]["pending"]) for hook in listed] == [
        (body["id"], "http://127.0.0.1:9/hook", 1)
    ]
    assert "secret" not in listed[0]
    log = call(decider, "get", f"/v1/webhooks/{body['id']}/deliveries").json()["deliveries"]
    assert [(entry["delivery_id"], entry["event"], entry["status"]) for entry in log] == [
        (tested["delivery_id"], "ping", "pending")
    ]
    removed = call(decider, "delete", f"/v1/webhooks/{body['id']}").json()
    assert removed["live"] is False and call(decider, "get", "/v1/webhooks").json()["webhooks"] == []


def test_a_read_token_lists_webhooks_without_their_urls_and_cannot_make_one(decider):
    call(decider, "post", "/v1/webhooks", {"url": "http://127.0.0.1:9/secret-topic"})
    reader = actions.create_token("reader", Scope.READ)[1]
    assert [hook["url"] for hook in call(reader, "get", "/v1/webhooks").json()["webhooks"]] == ["http://127.0.0.1:9/…"]
    refused = call(reader, "post", "/v1/webhooks", {"url": "http://127.0.0.1:9/mine"})
    assert (refused.status_code, refused.json()["code"]) == (403, "scope_missing")


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"url": "ftp://127.0.0.1/x"}, 400, "url must start with http:// or https://"),
        ({"url": "http://10.1.2.3/x"}, 400, "which BRIDGE_WEBHOOK_HOSTS"),
        ({"url": "http://user:pw@127.0.0.1/x"}, 400, "must not carry a user name or password"),
        ({"url": "http://127.0.0.1/x#frag"}, 400, "#fragment"),
        ({"url": "http://127.0.0.1:99999/x"}, 400, "cannot be read"),
        ({"url": "http://no-such-host.invalid/x"}, 400, "does not resolve"),
        ({"url": "http://127.0.0.1/x", "events": ["task.exploded"]}, 422, "events.0"),
        ({"url": "http://127.0.0.1/x", "format": "teams"}, 422, "format"),
        ({"url": "http://127.0.0.1/x", "root": "/nowhere/at/all"}, 403, "outside the allowed roots"),
    ],
)
def test_rest_refuses_a_bad_webhook_saying_what_is_wrong(decider, body, status, says):
    refused = call(decider, "post", "/v1/webhooks", body)
    assert refused.status_code == status, refused.content
    assert says in refused.json()["error"]
    assert not Webhook.objects.exists()


def test_an_unknown_webhook_is_a_404(decider):
    for method, path in (
        ("delete", "/v1/webhooks/7"),
        ("post", "/v1/webhooks/7/test"),
        ("get", "/v1/webhooks/7/deliveries"),
    ):
        answer = call(decider, method, path)
        assert (answer.status_code, answer.json()["code"]) == (404, "not_found")


HOSTS = ("127.0.0.1", "localhost", "LOCALHOST", "[::1]", "[::ffff:127.0.0.1]", "127.1", "10.0.0.1", "192.0.2.1")
URLS = st.builds(
    "{}{}{}{}".format,
    st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "http:/", ""]),
    st.sampled_from([*HOSTS, "user@127.0.0.1", "no-such-host.invalid", "[fe80::1%25eth0]", ""]),
    st.sampled_from(["", ":80", ":8080", ":0", ":65536", ":x"]),
    st.text(max_size=12),
)


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(url=URLS | st.text(max_size=40))
def test_any_url_is_either_refused_saying_why_or_sent_to_an_allowed_address(work_root, url):
    try:
        webhook, _ = webhook_to(url)
    except InvalidInput as refusal:
        assert refusal.detail.get("field") == "url" and refusal.message.startswith(("url ", "the host "))
        return
    parts = urlsplit(webhook.url)
    assert parts.scheme in ("http", "https") and parts.hostname, webhook.url
    assert set(actions.allowed_addresses(parts.hostname, actions.url_port(parts))) <= {"127.0.0.1", "::1"}
    webhook.delete()


def test_a_token_limited_to_roots_makes_and_sees_only_webhooks_under_them(work_root, decider):
    mine = work_root / "mine"
    mine.mkdir()
    limited = actions.create_token("limited", Scope.DECIDE, [str(mine)])[1]
    everywhere = call(limited, "post", "/v1/webhooks", {"url": "http://127.0.0.1:9/x"})
    assert (everywhere.status_code, everywhere.json()["code"]) == (403, "outside_token_roots")
    own = call(limited, "post", "/v1/webhooks", {"url": "http://127.0.0.1:9/x", "root": str(mine)}).json()
    other = call(decider, "post", "/v1/webhooks", {"url": "http://127.0.0.1:9/y"}).json()
    assert [hook["id"] for hook in call(limited, "get", "/v1/webhooks").json()["webhooks"]] == [own["id"]]
    assert call(limited, "delete", f"/v1/webhooks/{other['id']}").status_code == 404


def test_a_removed_webhook_cannot_be_tested(decider):
    made = call(decider, "post", "/v1/webhooks", {"url": "http://127.0.0.1:9/hook"}).json()
    call(decider, "delete", f"/v1/webhooks/{made['id']}")
    answer = call(decider, "post", f"/v1/webhooks/{made['id']}/test")
    assert (answer.status_code, answer.json()["code"]) == (409, "conflict")


# --- the admin -------------------------------------------------------------------------------------------------------


def test_the_admin_shows_webhooks_without_their_secret_and_the_delivery_log(work_root, django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    webhook, secret = webhook_to("http://127.0.0.1:9/hook")
    ping = actions.send_test(webhook.pk)
    page = client.get(f"/admin/jobs/webhook/{webhook.pk}/change/").content.decode()
    assert "http://127.0.0.1:9/hook" in page and "1 deliveries" in page and secret not in page
    log = client.get(f"/admin/jobs/webhookdelivery/?webhook__id__exact={webhook.pk}").content.decode()
    assert str(ping.delivery_id) in log and "ping" in log
    client.post("/admin/jobs/webhook/", {"action": "remove_webhooks", "_selected_action": [webhook.pk]})
    assert Webhook.objects.get().removed_by == "user:root"
    assert row(str(ping.delivery_id)).status == "failed"
