"""Webhook deliveries: each supervisor process sends what the outbox holds (jobs/actions/webhooks.py).

`DeliveryLoop` is a thread of the supervisor's. It wakes on the `webhooks` doorbell key (rung as deliveries are
enqueued, in any process) and on its own timer (a retry falling due, or IDLE_WAIT_S as the net under a lost ring),
claims due rows (a conditional UPDATE with a lease: of several supervisors, one sends each row at a time), and hands
each try to a small pool of sender threads, so a receiver that never answers holds one thread for
BRIDGE_WEBHOOK_TIMEOUT_S and nothing else: each webhook has at most one try under way, and the database is touched
only by the loop's own thread. A receiver that fails is rested (in this process) for the backoff before its next try,
rather than being sent every row it is owed; the first row it takes makes its other waiting rows due at once.

What a try sends (`prepare`): the payload in the webhook's format (`render`: Bridge's JSON, or the JSON Slack's and
Discord's incoming webhooks take, or an ntfy message whose Allow/Deny buttons open the decision links), signed
(`signature`), to the addresses its host may be reached at, re-checked now. How a try ends (`judge`): 2xx delivered;
a connection error, a timeout, 429 or 5xx tried again later; a redirect (never followed) or any other 4xx given up.
"""

import base64
import hashlib
import hmac
import http.client
import json
import logging
import queue
import re
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from jobs import actions
from jobs.actions.webhooks import MAX_BACKOFF_S, PING, HostNotAllowed
from jobs.core import doorbell
from jobs.core.resilience import DB_ERRORS, Outage, drop_connection
from jobs.core.terminal import printable
from jobs.models import PermissionRequest, Webhook, WebhookDelivery

log = logging.getLogger(__name__)

IDLE_WAIT_S = 5.0  # the longest the loop waits with nothing due: the net under a ring lost between processes
QUIET_CLOSE_S = 1.0  # a wait this long gives the loop's database connection back first (a pool slot, an open file)
STOP_WAIT_S = 2.0  # at stop, how long tries under way have to end and be recorded; the rest are handed back
HOUSEKEEPING_S = 60.0  # how often rows past BRIDGE_WEBHOOK_RETRY_S are given up and the old log pruned
MAX_ANSWER_BYTES = 4096  # of a receiver's answer, kept for the delivery log's last_error
USER_AGENT = "Bridge-Webhooks/1"
SLACK_MAX_CHARS = 3000  # Slack truncates a message's text past 40,000 and advises far less
DISCORD_MAX_CHARS = 2000  # Discord refuses more in `content`
NTFY_MAX_BYTES = 3500  # ntfy makes a longer message an attachment (4,096 bytes by default)
QUOTE_MAX_CHARS = 1500  # of a tool's input, a prompt or a result shown in a message


# --- what a delivery says, in each format -------------------------------------------------------------------------


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """X-Bridge-Signature's value: HMAC-SHA256 with the webhook's secret over "<timestamp>.<raw body>" (as Stripe
    signs), so a receiver can tell Bridge's deliveries from anyone else's and refuse an old one replayed."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


@dataclass(frozen=True)
class Message:
    """An event in words, for the formats people read: a title, Bridge's facts, the text an agent or a planner wrote
    (`quote`, shown so that it cannot pass for Bridge's words or links), and links as (label, url)."""

    title: str
    facts: list[str]
    quote: str = ""
    links: list[tuple[str, str]] = field(default_factory=list)
    page: str = ""  # the task's page: where tapping the notification leads


def message_of(payload: dict) -> Message:
    """The facts of a payload in Bridge's words."""
    event, task = payload["event"], payload.get("task") or {}
    page = task.get("url", "")
    opened = [("Open task", page)] if page else []
    where = f"{task.get('agent')} task in {task.get('cwd')}, made by {task.get('created_by') or 'someone'}"
    if event == PING:
        return Message("Bridge: test delivery", [payload.get("message", "")])
    if event == "task.started":
        return Message(f"Task started ({task.get('agent')})", [where], task.get("prompt", ""), opened, page)
    if event == "task.finished":
        return _finished(payload, where, opened)
    permission = payload.get("permission") or {}
    tool, summary = permission.get("tool_name", "?"), _input_summary(permission.get("input"))
    if event == "permission.requested":
        links = [(label.capitalize(), url) for label, url in (permission.get("links") or {}).items()]
        waits = f"denied if nobody answers by {permission.get('expires_at')}" if links else "no longer pending"
        return Message(f"Permission needed: {tool}", [where, waits], summary, links + opened, page)
    how = f"{permission.get('status')} by {permission.get('decided_by') or '?'} via {permission.get('decided_via')}"
    facts = [where, how] + ([f"message: {permission['message']}"] if permission.get("message") else [])
    return Message(f"Permission {permission.get('status')}: {tool}", facts, summary, opened, page)


def _finished(payload: dict, where: str, opened: list[tuple[str, str]]) -> Message:
    task = payload["task"]
    cost = payload.get("cost_usd")
    facts = [where] + ([f"cost ${cost:.4f}"] if isinstance(cost, int | float) else [])
    if payload.get("exit_code") is not None:
        facts.append(f"exit code {payload['exit_code']}")
    quote = payload.get("error") or payload.get("result") or ""
    return Message(f"Task {task.get('status')} ({task.get('agent')})", facts, quote, opened, task.get("url", ""))


def _input_summary(tool_input: object) -> str:
    """A tool's input as a person reads it: a shell command as itself, anything else as JSON."""
    if isinstance(tool_input, dict) and isinstance(tool_input.get("command"), str):
        return tool_input["command"]
    return json.dumps(tool_input, ensure_ascii=False, indent=1, default=str)


def render(form: str, payload: dict) -> tuple[bytes, dict[str, str]]:
    """The body and the headers of its kind (Content-Type, ntfy's own) a webhook of this format is sent."""
    if form == Webhook.Format.SLACK:
        return _json_body({"text": slack_text(message_of(payload))})
    if form == Webhook.Format.DISCORD:
        return _json_body({"content": discord_text(message_of(payload)), "allowed_mentions": {"parse": []}})
    if form == Webhook.Format.NTFY:
        return ntfy_message(message_of(payload), payload["event"])
    return _json_body(payload)


def _json_body(document: dict) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(document, ensure_ascii=False, separators=(",", ":"), default=str).encode()
    return body, {"Content-Type": "application/json"}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unfenced(text: str) -> str:
    """Text that cannot end the code block it is shown in: no two backticks side by side, nor one at either end
    (next to the fence), a zero-width space put between."""
    text = re.sub(r"`(?=`)", "`\u200b", text)
    return ("\u200b" if text.startswith("`") else "") + text + ("\u200b" if text.endswith("`") else "")


def slack_text(message: Message) -> str:
    """Slack's mrkdwn: &, < and > escaped in every text (so none can make a link or a mention) and no fence (```) in
    any, the quote in a code block, the links as <url|label>."""

    def escaped(text: str) -> str:
        shown = printable(text, multiline=True).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return re.sub(r"`(?=`)", "`\u200b", shown)

    head = "\n".join([f"*{escaped(message.title)}*", *map(escaped, message.facts)])
    links = " | ".join(f"<{url}|{label}>" for label, url in message.links)
    quote = _unfenced(escaped(_clip(message.quote, QUOTE_MAX_CHARS)))
    room = SLACK_MAX_CHARS - len(head) - len(links) - 10
    block = f"\n```{_clip(quote, max(room, 0))}```" if quote and room > 0 else ""
    return f"{head}{block}\n{links}".rstrip()


DISCORD_MARKUP = str.maketrans({char: "\\" + char for char in "\\*_~`|>[]()#<"})


def discord_text(message: Message) -> str:
    """Discord's markdown: every text's markup escaped (no link, heading or mention can be made of it; mentions are
    also switched off by `allowed_mentions`), the quote in a code block, the links as [label](<url>); at most
    DISCORD_MAX_CHARS in all, the quote cut to fit."""

    def escaped(text: str) -> str:
        return printable(text, multiline=True).translate(DISCORD_MARKUP)

    head = "\n".join([f"**{escaped(message.title)}**", *map(escaped, message.facts)])
    links = " · ".join(f"[{label}](<{url}>)" for label, url in message.links)
    quote = _unfenced(printable(_clip(message.quote, QUOTE_MAX_CHARS), multiline=True))
    room = DISCORD_MAX_CHARS - len(head) - len(links) - 12
    block = f"\n```\n{_clip(quote, room)}\n```" if quote and room > 1 else ""
    return _clip(f"{head}{block}\n{links}".rstrip(), DISCORD_MAX_CHARS)


NTFY_TAGS = {
    "permission.requested": "warning",
    "permission.decided": "ballot_box_with_check",
    "task.started": "arrow_forward",
    "task.finished": "checkered_flag",
    PING: "bell",
}


def ntfy_message(message: Message, event: str) -> tuple[bytes, dict[str, str]]:
    """An ntfy publish: the facts and the quote as plain text, the title in `Title`, the task page in `Click`, and
    each decision link as a `view` action (a button that opens the confirmation page: ntfy's http action would post
    to it without the page's check)."""
    text = "\n".join(printable(fact, multiline=True) for fact in message.facts)
    if message.quote:
        text += "\n\n" + printable(_clip(message.quote, QUOTE_MAX_CHARS), multiline=True)
    body = text.encode()[:NTFY_MAX_BYTES].decode(errors="ignore").encode()
    headers = {"Content-Type": "text/plain; charset=utf-8", "Title": _header_value(message.title)}
    headers["Tags"] = NTFY_TAGS.get(event, "bell")
    if message.page:
        headers["Click"] = message.page
    buttons = [(label, url) for label, url in message.links if label in ("Allow", "Deny")]
    if buttons:
        headers["Actions"] = "; ".join(f"view, {label}, {url}, clear=true" for label, url in buttons)
        headers["Priority"] = "high"
    return body, headers


def _header_value(text: str) -> str:
    """A header value from any text: one line, control characters shown escaped, and non-ASCII text as an RFC 2047
    encoded word (which ntfy decodes)."""
    line = printable(text)
    if line.isascii():
        return line
    return "=?utf-8?b?" + base64.b64encode(line.encode()).decode() + "?="


# --- one try -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """What one try sends, and where: the URL's host for the Host header and TLS, the addresses checked for it."""

    url: str
    host: str
    port: int
    target: str  # the path and query
    tls: bool
    addresses: list[str]
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Answer:
    """How a try ended: delivered (2xx), or the error, whether to try again, and how long the receiver asked to wait."""

    delivered: bool
    error: str = ""
    status_code: int | None = None
    retry: bool = True
    retry_after_s: float = 0.0


def prepare(delivery: WebhookDelivery) -> Request:
    """The request of one try: the payload (with the decision links of a request still pending), rendered and signed
    now, to the addresses BRIDGE_WEBHOOK_HOSTS allows for the URL's host now. Raises HostNotAllowed, or OSError when
    the name does not resolve."""
    webhook = delivery.webhook
    document = dict(delivery.payload)
    if delivery.event == "permission.requested":
        document["permission"] = {**document["permission"], "links": _links(delivery)}
    body, headers = render(webhook.format, document)
    parts = urlsplit(webhook.url)
    host, port = parts.hostname or "", actions.url_port(parts)
    headers |= {
        "User-Agent": USER_AGENT,
        "X-Bridge-Event": delivery.event,
        "X-Bridge-Delivery": str(delivery.delivery_id),
        "X-Bridge-Signature": signature(webhook.secret, int(time.time()), body),
    }
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    addresses = actions.allowed_addresses(host, port)
    return Request(webhook.url, host, port, target, parts.scheme == "https", addresses, body, headers)


def _links(delivery: WebhookDelivery) -> dict[str, str]:
    """The Allow and Deny links of the request, made as it is sent ({} once it is no longer pending)."""
    request_id = (delivery.payload.get("permission") or {}).get("request_id")
    if delivery.task_id is None or not isinstance(request_id, str):
        return {}
    perm = PermissionRequest.objects.filter(task_id=delivery.task_id, request_id=request_id).first()
    return actions.decision_links(perm) if perm is not None else {}


def post(request: Request, timeout: float) -> Answer:
    """One POST, each step (connect, send, every read) bounded by `timeout`; a redirect is an answer like any other,
    never followed."""
    try:
        connection = _connect(request, timeout)
    except OSError as exc:
        return Answer(False, f"could not connect to {request.host}:{request.port} ({exc})")
    try:
        connection.request("POST", request.target, body=request.body, headers=request.headers)
        response = connection.getresponse()
        text = response.read(MAX_ANSWER_BYTES).decode(errors="replace")
    except (OSError, http.client.HTTPException) as exc:
        return Answer(False, f"{request.host}:{request.port} did not answer ({exc.__class__.__name__}: {exc})")
    finally:
        connection.close()
    return judge(response.status, text, response.getheader("Location"), response.getheader("Retry-After"))


def _connect(request: Request, timeout: float) -> http.client.HTTPConnection:
    """A connection to the first of the checked addresses that answers: never to one the name resolves to later."""
    failure: OSError = OSError("no address to connect to")
    for address in request.addresses:
        try:
            sock = socket.create_connection((address, request.port), timeout)
        except OSError as exc:
            failure = exc
            continue
        if request.tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=request.host)
        kind = http.client.HTTPSConnection if request.tls else http.client.HTTPConnection
        connection = kind(request.host, request.port, timeout=timeout)
        connection.sock = sock
        return connection
    raise failure


def judge(status: int, text: str, location: str | None, retry_after: str | None) -> Answer:
    """What a receiver's answer means for the delivery."""
    said = f" ({printable(text.strip())[:300]})" if text.strip() else ""
    if 200 <= status < 300:
        return Answer(True, status_code=status)
    if 300 <= status < 400:
        where = f" to {location}" if location else ""
        error = f"answered {status}, a redirect{where}, which Bridge does not follow: point the webhook at that URL"
        return Answer(False, error, status, retry=False)
    if status == 429 or status >= 500 or status < 200:
        wait = float(retry_after) if retry_after and retry_after.strip().isdigit() else 0.0
        return Answer(False, f"answered {status}{said}", status, retry_after_s=wait)
    return Answer(False, f"answered {status}{said}: refused, not tried again", status, retry=False)


# --- the loop ------------------------------------------------------------------------------------------------------


@dataclass
class Try:
    """A claimed row being sent: the lease it was claimed under, and what is sent."""

    delivery: WebhookDelivery
    lease: uuid.UUID
    request: Request


class DeliveryLoop:
    """Sends this process's share of the outbox until stopped (one per supervisor)."""

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="webhook-deliveries", daemon=True)
        self._tries: queue.Queue[Try | None] = queue.Queue()
        self._answers: queue.Queue[tuple[Try, Answer]] = queue.Queue()
        self._senders: list[threading.Thread] = []
        self._under_way: dict[int, Try] = {}  # webhook id → its try being sent
        self._resting: dict[int, float] = {}  # webhook id → time.monotonic() until which it is not tried
        self._failures: dict[int, int] = {}  # webhook id → tries in a row that failed and will be tried again
        self._housekept = 0.0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Claim nothing more; give the tries under way STOP_WAIT_S to end, and hand the rest back."""
        self._stopping.set()
        self._wake.set()
        self._thread.join(STOP_WAIT_S + 5)

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        unsubscribe = doorbell.subscribe(actions.WEBHOOKS, self.wake)
        outage = Outage("webhook deliveries")
        try:
            while not self._stopping.is_set():
                self._wake.clear()
                started = time.monotonic()
                try:
                    self._record_answers()
                    self._housekeeping()
                    self._hand_off(self._claim_due())
                    wait = self._next_wait()
                    outage.recovered()
                except DB_ERRORS as exc:
                    wait = outage.failed(exc, started)
                    drop_connection()
                except Exception:  # a bug must not end the loop: the rows stay, and are looked at again
                    log.exception("webhook deliveries: the loop failed; looking again in %s s", IDLE_WAIT_S)
                    wait = IDLE_WAIT_S
                if wait >= QUIET_CLOSE_S:
                    drop_connection()
                self._wake.wait(wait)
        finally:
            unsubscribe()
            self._shutdown()

    def _claim_due(self) -> list[Try]:
        """Claim the first due row of each webhook that has no try under way and is not resting, up to the free
        senders, each made ready to send."""
        free = settings.BRIDGE_WEBHOOK_CONCURRENCY - len(self._under_way)
        if free <= 0:
            return []
        lease = uuid.uuid4()
        ready = [self._prepared(delivery, lease) for delivery in actions.claim_due(self._skipped(), free, lease)]
        return [attempt for attempt in ready if attempt is not None]

    def _skipped(self) -> set[int]:
        now = time.monotonic()
        self._resting = {webhook: until for webhook, until in self._resting.items() if until > now}
        return set(self._under_way) | set(self._resting)

    def _prepared(self, delivery: WebhookDelivery, lease: uuid.UUID) -> Try | None:
        """The try of a claimed row, under way from now; None when it cannot be sent now (recorded as a failed try)."""
        try:
            request = prepare(delivery)
        except HostNotAllowed as exc:
            actions.record_failure(delivery, lease, exc.message, retry=False)
            return None
        except OSError as exc:  # the name does not resolve now: a later try may
            self._failed(delivery, lease, Answer(False, f"could not resolve {delivery.webhook.url!r}: {exc}"))
            return None
        except Exception as exc:  # a bug: the row is tried again later (a fixed Bridge sends it)
            log.exception("webhook delivery %s: could not be prepared", delivery.delivery_id)
            self._failed(delivery, lease, Answer(False, f"Bridge could not prepare it: {exc.__class__.__name__}"))
            return None
        attempt = Try(delivery, lease, request)
        self._under_way[delivery.webhook_id] = attempt
        return attempt

    def _hand_off(self, ready: list[Try]) -> None:
        """Give the tries to the sender threads, started as needed up to BRIDGE_WEBHOOK_CONCURRENCY."""
        for attempt in ready:
            if len(self._senders) < min(len(self._under_way), settings.BRIDGE_WEBHOOK_CONCURRENCY):
                sender = threading.Thread(target=self._send, name="webhook-sender", daemon=True)
                self._senders.append(sender)
                sender.start()
            self._tries.put(attempt)

    def _send(self) -> None:
        """A sender thread: tries from the loop, answers back; never touches the database."""
        while (attempt := self._tries.get()) is not None:
            try:
                answer = post(attempt.request, settings.BRIDGE_WEBHOOK_TIMEOUT_S)
            except Exception as exc:  # a bug must not lose the row: it is tried again
                log.exception("webhook delivery %s: sending failed", attempt.delivery.delivery_id)
                answer = Answer(False, f"Bridge failed to send it: {exc.__class__.__name__}: {exc}")
            self._answers.put((attempt, answer))
            self._wake.set()

    def _record_answers(self) -> None:
        while True:
            try:
                attempt, answer = self._answers.get_nowait()
            except queue.Empty:
                return
            self._under_way.pop(attempt.delivery.webhook_id, None)
            self._record(attempt, answer)

    def _record(self, attempt: Try, answer: Answer) -> None:
        delivery, webhook = attempt.delivery, attempt.delivery.webhook_id
        if answer.delivered:
            caught_up = self._failures.pop(webhook, 0) > 0
            self._resting.pop(webhook, None)
            if not actions.record_delivered(delivery, attempt.lease, answer.status_code or 0, caught_up):
                log.warning("webhook delivery %s: delivered after its lease ran out", delivery.delivery_id)
            return
        self._failed(delivery, attempt.lease, answer)

    def _failed(self, delivery: WebhookDelivery, lease: uuid.UUID, answer: Answer) -> None:
        """Record a failed try; a receiver that may take it later is rested for the backoff (its other rows wait)."""
        wait = actions.record_failure(
            delivery,
            lease,
            answer.error,
            status_code=answer.status_code,
            retry=answer.retry,
            wait_at_least=answer.retry_after_s,
        )
        if wait is not None:
            failures = self._failures[delivery.webhook_id] = self._failures.get(delivery.webhook_id, 0) + 1
            rest = max(actions.backoff_s(failures), min(answer.retry_after_s, MAX_BACKOFF_S))
            self._resting[delivery.webhook_id] = time.monotonic() + rest

    def _next_wait(self) -> float:
        """Until the next row falls due, a rested webhook may be tried again, or IDLE_WAIT_S; a sender's answer or a
        ring wakes the loop before."""
        now = time.monotonic()
        waits = [IDLE_WAIT_S, *(until - now for until in self._resting.values())]
        if len(self._under_way) < settings.BRIDGE_WEBHOOK_CONCURRENCY:
            due = actions.next_due_at(self._skipped())
            if due is not None:
                waits.append((due - timezone.now()).total_seconds())
        return max(0.0, min(waits))

    def _housekeeping(self) -> None:
        if time.monotonic() - self._housekept < HOUSEKEEPING_S:
            return
        self._housekept = time.monotonic()
        given_up, pruned = actions.give_up_overdue(), actions.prune_deliveries()
        if given_up or pruned:
            log.info("webhooks: gave up %d delivery(ies) past BRIDGE_WEBHOOK_RETRY_S; pruned %d", given_up, pruned)

    def _shutdown(self) -> None:
        """Let the tries under way end for STOP_WAIT_S and record them; hand back what has not ended, so the next
        supervisor sends it at once (it may then be delivered twice: the delivery id tells)."""
        deadline = time.monotonic() + STOP_WAIT_S
        try:
            while self._under_way and time.monotonic() < deadline:
                self._wake.wait(max(0.0, deadline - time.monotonic()))
                self._wake.clear()
                self._record_answers()
            for attempt in list(self._under_way.values()):
                actions.release_delivery(attempt.delivery, attempt.lease)
        except DB_ERRORS as exc:
            log.warning("webhook deliveries: could not record the last tries (%s); their leases will run out", exc)
        finally:
            for _ in self._senders:
                self._tries.put(None)
            drop_connection()
