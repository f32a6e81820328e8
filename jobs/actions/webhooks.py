"""Webhooks: receivers Bridge tells when a task starts, asks permission, is answered and ends (issue 32).

A webhook names a URL, the events it wants and which tasks (a root, an agent, whoever made them). Deliveries are an
outbox: `enqueue_deliveries` writes one `WebhookDelivery` row per event and matching webhook in the transaction that
appends the event (events.append_events), so an event is never recorded without its deliveries, nor the reverse. Each
supervisor process sends them (jobs/supervision/deliveries.py), claiming a row with a conditional UPDATE and a lease,
so that several supervisors (PostgreSQL) send each row one at a time; a row is retried with backoff until the receiver
takes it or BRIDGE_WEBHOOK_RETRY_S has passed, and stays as the delivery log. Delivery is at least once: the
`delivery_id` stays the same across retries so a receiver drops what it has seen.

A webhook reaches only the hosts BRIDGE_WEBHOOK_HOSTS names (`allowed_addresses`), checked when it is made and again,
names resolved, before each try: Bridge is not a way to reach any address a caller names.

Decision links are not stored in a payload: the sender adds them as it sends (they are capabilities, and the delivery
log is readable with scope `read`).
"""

import ipaddress
import json
import secrets
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast
from urllib.parse import SplitResult, urlsplit

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Field, Max, QuerySet
from django.utils import timezone

from jobs.actions import rows
from jobs.agents import registry
from jobs.core import doorbell, paths
from jobs.core.access import Caller
from jobs.core.errors import Conflict, ErrorCode, InvalidInput, NotFound
from jobs.core.inputs import check_text
from jobs.core.resilience import Backoff
from jobs.core.vocabulary import TERMINAL_STATUSES, TOKEN_FIELDS, PermissionStatus, Source, Status
from jobs.models import Task, Webhook, WebhookDelivery

WEBHOOKS = doorbell.WEBHOOKS  # the doorbell key rung when deliveries are enqueued: the delivery loops wake on it
EVENT_KINDS = frozenset({"status", "permission_request", "permission_decision"})  # the event kinds a webhook hears of
PING = "ping"  # the event of a test delivery
FORMATS = tuple(Webhook.Format.values)
MAX_URL_CHARS = 2000
MAX_LIVE_WEBHOOKS = 100
TASK_PAGE = "/tasks/{}/"  # bridge/urls.py, "task-page": on BRIDGE_PUBLIC_URL, the link a receiver shows
PROMPT_HEAD_CHARS = 200
MAX_TEXT_CHARS = 8000  # of a result or an error in a payload
MAX_INPUT_BYTES = 16 * 1024  # of a tool's input in a payload (a Write tool's whole file would be far more)
MAX_BACKOFF_S = 3600.0  # the longest wait between two tries
LEASE_MARGIN_S = 60.0  # a claim outlives the longest try by this much before another process may take the row
LOG_LIMIT = 500


# --- making, listing and removing webhooks --------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckedWebhook:
    """A webhook's columns, checked."""

    url: str
    events: list[str]
    root: str
    agent: str
    created_for: str
    format: str


def create_webhook(
    url: str,
    *,
    events: list[str] | None = None,
    root: str = "",
    agent: str = "",
    created_for: str = "",
    format: str = Webhook.Format.BRIDGE,
    by: str = "",
    caller: Caller | None = None,
) -> tuple[Webhook, str]:
    """Make a webhook; returns it and its secret, which is shown this once. Checked first: the URL (http or https, to
    a host BRIDGE_WEBHOOK_HOSTS allows), the events and the format Bridge knows, a root inside the allowed roots and,
    for a caller limited to roots, under them."""
    fields = checked_webhook(url, events, root, agent, created_for, format)
    check_webhook_root(caller, fields.root)
    secret = secrets.token_hex(32)
    with transaction.atomic():
        live = Webhook.objects.live().count()
        if live >= MAX_LIVE_WEBHOOKS:
            raise Conflict(
                f"{live} webhooks are live, the most Bridge keeps: remove one first (DELETE /v1/webhooks/<id>)"
            )
        webhook = Webhook.objects.create(
            url=fields.url,
            events=fields.events,
            root=fields.root,
            agent=fields.agent,
            created_for=fields.created_for,
            format=fields.format,
            secret=secret,
            created_by=by,
        )
    return webhook, secret


def checked_webhook(
    url: str, events: list[str] | None, root: str, agent: str, created_for: str, format: str
) -> CheckedWebhook:
    """A webhook's columns from what a caller sent, or the refusal that names what to change."""
    wanted = list(Webhook.EVENTS) if events is None else events
    unknown = [str(event)[:50] for event in wanted if event not in Webhook.EVENTS]
    if unknown or not wanted:
        raise InvalidInput(
            f"events must be some of {', '.join(Webhook.EVENTS)}, not {unknown or 'none'}", field="events"
        )
    if format not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}, not {str(format)[:50]!r}", field="format")
    if agent and registry.get_agent(agent) is None:
        names = ", ".join(registry.agent_names())
        raise InvalidInput(f"agent must be one of {names}, or empty for any, not {agent[:50]!r}", field="agent")
    resolved_root = str(paths.resolve_dir(root, "root")) if (root or "").strip() else ""
    return CheckedWebhook(
        url=checked_url(url),
        events=[event for event in Webhook.EVENTS if event in wanted],
        root=resolved_root,
        agent=agent or "",
        created_for=check_text("created_for", created_for or "", 200).strip(),
        format=format,
    )


def check_webhook_root(caller: Caller | None, root: str) -> None:
    """A token limited to roots makes, sees and removes only webhooks for tasks under them: never one for every task."""
    if caller is not None:
        caller.check_made_under_roots("a webhook", root)


def get_webhook(webhook_id: object, caller: Caller | None = None) -> Webhook:
    """A webhook by its id, removed ones too, if the caller may see it."""
    webhook = Webhook.objects.filter(pk=webhook_id).first() if isinstance(webhook_id, int) else None
    if webhook is not None and (caller is None or not caller.roots or (webhook.root and caller.covers(webhook.root))):
        return webhook
    raise NotFound(f"no webhook {str(webhook_id)[:50]!r}: GET /v1/webhooks lists them", code=ErrorCode.NOT_FOUND)


def list_webhooks(caller: Caller | None = None, include_removed: bool = False) -> list[Webhook]:
    """The live webhooks (or every one ever made), oldest first; for a caller limited to roots, those under them."""
    webhooks = list(Webhook.objects.all() if include_removed else Webhook.objects.live())
    if caller is None or not caller.roots:
        return webhooks
    return [webhook for webhook in webhooks if webhook.root and caller.covers(webhook.root)]


def remove_webhook(webhook_id: object, by: str = "", caller: Caller | None = None) -> Webhook:
    """Stop telling a webhook about tasks; its row and delivery log stay. What it still had to deliver is given up
    (a try under way ends as it ends). Removing a removed webhook changes nothing."""
    webhook = get_webhook(webhook_id, caller)
    now = timezone.now()
    with transaction.atomic():
        if Webhook.objects.filter(pk=webhook.pk, removed_at=None).update(removed_at=now, removed_by=by):
            WebhookDelivery.objects.pending().filter(webhook=webhook, lease__isnull=True).update(
                status=WebhookDelivery.Status.FAILED, last_error=f"the webhook was removed by {by or 'someone'}"
            )
    webhook.refresh_from_db()
    return webhook


def send_test(webhook_id: object, caller: Caller | None = None) -> WebhookDelivery:
    """Enqueue a `ping` delivery to a live webhook, sent like any other (signed, retried, logged)."""
    webhook = get_webhook(webhook_id, caller)
    if webhook.removed_at is not None:
        raise Conflict(f"webhook {webhook.pk} was removed {webhook.removed_at.isoformat()}: nothing is sent to it")
    delivery_id, now = uuid.uuid4(), timezone.now()
    payload = {
        "event": PING,
        "delivery_id": str(delivery_id),
        "created_at": now.isoformat(),
        "webhook": {"id": webhook.pk, "events": webhook.events, "format": webhook.format},
        "message": "A test delivery from Bridge: this webhook is reached.",
    }
    with transaction.atomic():
        delivery = WebhookDelivery.objects.create(
            webhook=webhook, delivery_id=delivery_id, event=PING, payload=payload, created_at=now, next_attempt_at=now
        )
        doorbell.ring(WEBHOOKS)
    return delivery


def webhook_data(webhook: Webhook, stats: dict | None = None, full_url: bool = True) -> dict:
    """A webhook as every interface shows it (never its secret). The URL is shown whole only with `full_url`: a
    Slack or Discord webhook URL, or an ntfy topic, is itself a key to what is sent there, decision links included."""
    return {
        "id": webhook.pk,
        "url": webhook.url if full_url else _origin_only(webhook.url),
        "events": webhook.events,
        "root": webhook.root,
        "agent": webhook.agent,
        "created_for": webhook.created_for,
        "format": webhook.format,
        "created_by": webhook.created_by,
        "created_at": webhook.created_at,
        "removed_at": webhook.removed_at,
        "removed_by": webhook.removed_by,
        "live": webhook.removed_at is None,
        **({"deliveries": stats} if stats is not None else {}),
    }


def _origin_only(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}/…"


def delivery_stats(webhooks: list[Webhook]) -> dict[int, dict]:
    """For each webhook, how many deliveries are pending, delivered and failed, when one was last delivered, and the
    newest failure: two queries for them all."""
    ids = [webhook.pk for webhook in webhooks]
    empty = {"pending": 0, "delivered": 0, "failed": 0, "last_delivered_at": None, "last_failure": None}
    stats: dict[int, dict] = {pk: dict(empty) for pk in ids}
    counted = WebhookDelivery.objects.filter(webhook_id__in=ids).values("webhook_id", "status")
    for row in counted.annotate(n=Count("id"), last=Max("delivered_at")).order_by():
        stats[row["webhook_id"]][row["status"]] = row["n"]
        if row["status"] == WebhookDelivery.Status.DELIVERED:
            stats[row["webhook_id"]]["last_delivered_at"] = row["last"]
    newest_failures = (
        WebhookDelivery.objects.filter(webhook_id__in=ids, status=WebhookDelivery.Status.FAILED)
        .values("webhook_id")
        .annotate(newest=Max("id"))
        .values_list("newest", flat=True)
    )
    for failed in WebhookDelivery.objects.filter(pk__in=list(newest_failures)):
        stats[failed.webhook_id]["last_failure"] = {
            "delivery_id": str(failed.delivery_id),
            "error": failed.last_error,
            "status_code": failed.last_status_code,
            "at": failed.created_at,
        }
    return stats


def list_deliveries(webhook: Webhook, status: str | None = None, limit: int = 50) -> list[WebhookDelivery]:
    """A webhook's delivery log, newest first."""
    deliveries = WebhookDelivery.objects.filter(webhook=webhook)
    if status:
        deliveries = deliveries.filter(status=status)
    return list(deliveries.select_related("task").order_by("-id")[: min(limit, LOG_LIMIT)])


def delivery_data(delivery: WebhookDelivery) -> dict:
    """One row of the delivery log."""
    pending = delivery.status == WebhookDelivery.Status.PENDING
    return {
        "delivery_id": str(delivery.delivery_id),
        "event": delivery.event,
        "task_id": str(delivery.task.public_id) if delivery.task is not None else None,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at if pending else None,
        "last_status_code": delivery.last_status_code,
        "last_error": delivery.last_error,
        "created_at": delivery.created_at,
        "delivered_at": delivery.delivered_at,
        "payload": delivery.payload,
    }


# --- which hosts a webhook may reach -------------------------------------------------------------------------------


class HostNotAllowed(InvalidInput):
    """A URL whose host is not one BRIDGE_WEBHOOK_HOSTS allows, or that resolves to no address it allows: permanent
    until the setting changes, so a delivery to it fails at once."""


def checked_url(url: object) -> str:
    """A webhook URL Bridge will send to: http or https, to a host it may reach, with nothing it would drop or that
    the request line cannot carry (credentials, a fragment, spaces, non-ASCII: percent-encode those)."""
    text = check_text("url", url, MAX_URL_CHARS).strip()
    parts = _split(text)
    if parts.scheme not in ("http", "https"):
        raise InvalidInput(f"url must start with http:// or https://, not {text[:60]!r}", field="url")
    if not parts.hostname:
        raise InvalidInput(f"url {text[:200]!r} names no host", field="url")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput(
            "url must not carry a user name or password (put a receiver's token in its query instead, such as "
            "ntfy's ?auth=)",
            field="url",
        )
    if parts.fragment or "#" in text:
        raise InvalidInput("url must not have a #fragment: it is never sent to the receiver", field="url")
    if not text.isascii() or any(ord(char) <= 32 or ord(char) == 127 for char in text):
        raise InvalidInput("url must be ASCII without spaces or control characters: percent-encode them", field="url")
    try:
        allowed_addresses(parts.hostname, url_port(parts))
    except OSError as exc:
        raise InvalidInput(
            f"the host {parts.hostname!r} does not resolve ({exc}): check the url", field="url"
        ) from None
    return text


def _split(text: str) -> SplitResult:
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises for a port that is not a number from 0 to 65535
    except ValueError as exc:
        raise InvalidInput(f"url {text[:200]!r} cannot be read: {exc}", field="url") from None
    return parts


def url_port(parts: SplitResult) -> int:
    return parts.port or (443 if parts.scheme == "https" else 80)


def allowed_addresses(host: str, port: int) -> list[str]:
    """The addresses Bridge may connect to for `host`: what it resolves to now, kept where BRIDGE_WEBHOOK_HOSTS
    allows them (a listed address or network, or an address a listed name resolves to). HostNotAllowed when none
    is; OSError when the name does not resolve (a try may work later)."""
    resolved = _resolve(host, port)
    allowed = _allowed_networks(port)
    kept = [address for address in resolved if any(ipaddress.ip_address(address) in net for net in allowed)]
    if kept:
        return kept
    raise HostNotAllowed(
        f"the host {host!r} resolves to {', '.join(resolved)}, which BRIDGE_WEBHOOK_HOSTS "
        f"({', '.join(settings.BRIDGE_WEBHOOK_HOSTS)}) does not allow: a webhook reaches only those hosts; add the "
        "host to the setting to allow it",
        field="url",
        allowed_hosts=list(settings.BRIDGE_WEBHOOK_HOSTS),
    )


def _resolve(host: str, port: int) -> list[str]:
    """The addresses a host name (or an address) stands for, each once, IPv4-mapped IPv6 addresses as IPv4."""
    found: list[str] = []
    for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if str(address) not in found:
            found.append(str(address))
    return found


def _allowed_networks(port: int) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """BRIDGE_WEBHOOK_HOSTS as networks: addresses and networks as written, each name as the addresses it resolves to
    now (a name that does not resolve allows nothing)."""
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for host in settings.BRIDGE_WEBHOOK_HOSTS:
        try:
            networks.append(ipaddress.ip_network(host, strict=False))
        except ValueError:
            try:
                networks += [ipaddress.ip_network(address) for address in _resolve(host, port)]
            except OSError:
                continue
    return networks


# --- the outbox: written with the events ---------------------------------------------------------------------------


def enqueue_deliveries(task: Task, events: list[tuple[str, dict]]) -> None:
    """In append_events' transaction: one delivery row per event a webhook hears of and live webhook that wants it
    for this task. Costs one read of the live webhooks (a handful of rows, no cache to keep current) for a batch that
    holds a status or permission event, which the caller checks first; an imported task's history tells no one."""
    if task.source == Source.IMPORTED:
        return
    webhooks = rows.select(Webhook, removed_at=None)
    if not webhooks:
        return
    now = timezone.now()
    deliveries: list[tuple[int, str, dict]] = []
    for kind, data in events:
        name = event_name(kind, data)
        wanting = [webhook for webhook in webhooks if name is not None and wants(webhook, name, task)]
        if name is not None and wanting:
            told = payload(name, now, task, data)
            deliveries += [(webhook.pk, name, {**told, "delivery_id": str(uuid.uuid4())}) for webhook in wanting]
    if deliveries:
        _insert_deliveries(task.pk, now, deliveries)
        doorbell.ring(WEBHOOKS)


INSERTED_COLUMNS = (
    "webhook",
    "delivery_id",
    "event",
    "task",
    "payload",
    "status",
    "attempts",
    "next_attempt_at",
    "last_error",
    "created_at",
)


def _insert_deliveries(task_pk: int, now: datetime, deliveries: list[tuple[int, str, dict]]) -> None:
    """The rows as one plain batched INSERT, as events go in (events._insert_events): building them through the ORM
    cost ten times the write (a status event wanted by 10 webhooks: 6 ms, of which bulk_create 4.6)."""
    meta, ops = WebhookDelivery._meta, connection.ops
    names = INSERTED_COLUMNS
    fields = [cast(Field, meta.get_field(name)) for name in names]
    columns = ", ".join(ops.quote_name(field.column) for field in fields)
    sql = f"INSERT INTO {ops.quote_name(meta.db_table)} ({columns}) VALUES ({', '.join(['%s'] * len(names))})"
    id_field, encoder = fields[1], meta.get_field("payload").encoder
    when = ops.adapt_datetimefield_value(now)
    values = [
        (
            webhook_pk,
            id_field.get_db_prep_value(uuid.UUID(body["delivery_id"]), connection),
            name,
            task_pk,
            ops.adapt_json_value(body, encoder),
            WebhookDelivery.Status.PENDING.value,
            0,
            when,
            "",
            when,
        )
        for webhook_pk, name, body in deliveries
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, values)


def event_name(kind: str, data: dict) -> str | None:
    """The webhook event a transcript event is, if any: a task's start and end, a request that waits for someone
    (one a rule or bypass mode decided as it came is told only as decided), and a decision."""
    if kind == "status":
        status = data.get("status")
        return "task.started" if status == Status.RUNNING else "task.finished" if status in TERMINAL_STATUSES else None
    if kind == "permission_request":
        return "permission.requested" if data.get("status") == PermissionStatus.PENDING else None
    return "permission.decided" if kind == "permission_decision" else None


def wants(webhook: Webhook, name: str, task: Task) -> bool:
    """Whether a webhook asked for this event of this task: the event, the agent, the creator, a root over its cwd."""
    return (
        name in webhook.events
        and (not webhook.agent or webhook.agent == task.agent)
        and (not webhook.created_for or webhook.created_for == task.created_by)
        and (not webhook.root or paths.within(task.cwd, webhook.root))
    )


def payload(name: str, now: datetime, task: Task, data: dict) -> dict:
    """Bridge's JSON for one event: what happened, to which task, and the permission or the outcome; each delivery
    of it fills in its own `delivery_id`."""
    status = data.get("status") if name.startswith("task.") else task.status
    body: dict = {
        "event": name,
        "delivery_id": "",
        "created_at": now.isoformat(),
        "task": task_data(task, status or task.status),
    }
    if name.startswith("permission."):
        body["permission"] = _permission_block(data)
    if name == "task.finished":
        body |= _outcome(task, data)
    return body


def task_data(task: Task, status: str) -> dict:
    base = settings.BRIDGE_PUBLIC_URL.rstrip("/")
    return {
        "id": str(task.public_id),
        "agent": task.agent,
        "cwd": task.cwd,
        "status": status,
        "prompt": task.prompt[:PROMPT_HEAD_CHARS],
        "created_by": task.created_by,
        "url": base + TASK_PAGE.format(task.public_id),
    }


def _permission_block(data: dict) -> dict:
    """The request as the transcript shows it (actions.permission_data), its input cut to MAX_INPUT_BYTES."""
    block = {key: value for key, value in data.items() if key != "remembered"}
    text = _json_text(block.get("input"))
    if len(text.encode()) > MAX_INPUT_BYTES:
        block["input"] = {"truncated": True, "bytes": len(text.encode()), "head": text[: MAX_INPUT_BYTES // 4]}
    return block


def _json_text(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _outcome(task: Task, data: dict) -> dict:
    """How a task ended: its result or error (each cut to MAX_TEXT_CHARS), exit code, cost and tokens."""
    usage = data.get("usage") or {}
    result, error = data.get("result") or task.result, data.get("error") or task.error
    return {
        "result": result[:MAX_TEXT_CHARS],
        "error": error[:MAX_TEXT_CHARS],
        "exit_code": data.get("exit_code", task.exit_code),
        "cost_usd": usage.get("cost_usd", task.cost_usd),
        "usage": {field: usage.get(field, getattr(task, field)) for field in (*TOKEN_FIELDS, "num_turns")},
    }


# --- the outbox: sending -------------------------------------------------------------------------------------------


def lease_s() -> float:
    """How long a claim holds a row: longer than a try can take (connect, send and read, each bounded)."""
    return 3 * settings.BRIDGE_WEBHOOK_TIMEOUT_S + LEASE_MARGIN_S


@dataclass(frozen=True)
class Columns:
    """The delivery table and the columns the statements written by hand name, as the database spells them."""

    table: str
    id: str
    webhook: str
    status: str
    lease: str
    until: str
    due_at: str

    @classmethod
    def quoted(cls) -> "Columns":
        ops, meta = connection.ops, WebhookDelivery._meta
        names = ("id", "webhook", "status", "lease", "lease_until", "next_attempt_at")
        return cls(
            ops.quote_name(meta.db_table), *(ops.quote_name(cast(Field, meta.get_field(n)).column) for n in names)
        )

    def free(self) -> str:
        """Pending and held by no sender (params: status, now)."""
        return f"{self.status} = %s AND ({self.until} IS NULL OR {self.until} < %s)"

    def sending(self) -> str:
        """The webhooks a try is under way to (params: status, now)."""
        return f"SELECT {self.webhook} FROM {self.table} WHERE {self.status} = %s AND {self.until} >= %s"

    def not_in(self, skip: set[int]) -> str:
        return f" AND {self.webhook} NOT IN ({', '.join(['%s'] * len(skip))})" if skip else ""


def claim_due(skip_webhooks: set[int], limit: int, lease: uuid.UUID) -> list[WebhookDelivery]:
    """Take the oldest due row of each webhook but those skipped (this loop is resting them) and those a try is under
    way to (by any process), at most `limit`, for one try under `lease`, with their webhooks: one conditional UPDATE,
    so of several processes claiming at once each row goes to one, and is held until its lease ends. One try per
    webhook at a time, oldest first: a receiver gets its deliveries in order, and one that never answers holds up
    only its own.

    Written by hand, as the seq increment is (events._take_seqs): it follows every ring of `webhooks`, and the ORM
    took 8 ms to build it and read the rows back, where this takes 0.6."""
    now, c = timezone.now(), Columns.quoted()
    due = f"{c.free()} AND {c.due_at} <= %s"
    sql = (
        f"UPDATE {c.table} SET {c.lease} = %s, {c.until} = %s WHERE {due} AND {c.id} IN ("
        f"SELECT MIN({c.id}) FROM {c.table} WHERE {due}{c.not_in(skip_webhooks)} AND {c.webhook} NOT IN "
        f"({c.sending()}) GROUP BY {c.webhook} ORDER BY 1 LIMIT %s)"
    )
    pending, at = WebhookDelivery.Status.PENDING.value, connection.ops.adapt_datetimefield_value(now)
    held_until = connection.ops.adapt_datetimefield_value(now + timedelta(seconds=lease_s()))
    lease_value = WebhookDelivery._meta.get_field("lease").get_db_prep_value(lease, connection)
    params = [lease_value, held_until, pending, at, at, pending, at, at, *sorted(skip_webhooks), pending, at, limit]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if not cursor.rowcount:
            return []
    return rows.select(WebhookDelivery, status=pending, lease=lease, order_by=("id",), related=("webhook", "task"))


def next_due_at(skip_webhooks: set[int]) -> datetime | None:
    """When `claim_due` may next find a row of the webhooks not skipped: the soonest retry of one no try is under way
    to, or the soonest end of a try's lease elsewhere (its process may have died; if not, it sends the next row).
    Written by hand like the claim, which it follows in every turn of the loop."""
    now, c = timezone.now(), Columns.quoted()
    skipped = c.not_in(skip_webhooks)
    sql = (
        f"SELECT (SELECT MIN({c.due_at}) FROM {c.table} WHERE {c.free()}{skipped} AND {c.webhook} NOT IN "
        f"({c.sending()})), (SELECT MIN({c.until}) FROM {c.table} WHERE {c.status} = %s AND {c.until} >= %s{skipped})"
    )
    pending, at = WebhookDelivery.Status.PENDING.value, connection.ops.adapt_datetimefield_value(now)
    skip = sorted(skip_webhooks)
    with connection.cursor() as cursor:
        cursor.execute(sql, [pending, at, *skip, pending, at, pending, at, *skip])
        found = [_datetime(value) for value in cursor.fetchone() or () if value is not None]
    return min(found, default=None)


def _datetime(value: object) -> datetime:
    """A datetime column's value as the ORM would give it (SQLite hands back text)."""
    field = cast(Field, WebhookDelivery._meta.get_field("next_attempt_at"))
    column = field.get_col(WebhookDelivery._meta.db_table)
    # Field.get_db_converters exists; its stubs do not have it (as in rows._columns).
    converters = connection.ops.get_db_converters(column) + field.get_db_converters(connection)  # type: ignore[attr-defined]
    for convert in converters:
        value = convert(value, column, connection)
    return cast(datetime, value)


def record_delivered(delivery: WebhookDelivery, lease: uuid.UUID, status_code: int, catch_up: bool) -> bool:
    """The receiver took it. With `catch_up` (its webhook had failed lately), its other pending rows waiting out a
    backoff are due at once: the receiver is back. False when the lease was lost (another process took the row)."""
    now = timezone.now()
    with transaction.atomic():
        kept = _held(delivery, lease).update(
            status=WebhookDelivery.Status.DELIVERED,
            attempts=F("attempts") + 1,
            delivered_at=now,
            last_status_code=status_code,
            last_error="",
            lease=None,
            lease_until=None,
        )
        if kept and catch_up:
            WebhookDelivery.objects.pending().filter(webhook_id=delivery.webhook_id, next_attempt_at__gt=now).update(
                next_attempt_at=now
            )
    return bool(kept)


def record_failure(
    delivery: WebhookDelivery,
    lease: uuid.UUID,
    error: str,
    *,
    status_code: int | None = None,
    retry: bool = True,
    wait_at_least: float = 0.0,
) -> float | None:
    """A try that failed: tried again after a backoff (doubling from BRIDGE_WEBHOOK_BACKOFF_S, jittered, at least
    `wait_at_least`, as a 429's Retry-After asks) until BRIDGE_WEBHOOK_RETRY_S after the event, or given up at once
    when `retry` is False. Returns the wait before the next try, None when given up (or the lease was lost)."""
    attempts = delivery.attempts + 1
    now = timezone.now()
    deadline = delivery.created_at + timedelta(seconds=settings.BRIDGE_WEBHOOK_RETRY_S)
    wait = max(backoff_s(attempts), min(wait_at_least, MAX_BACKOFF_S))
    fields: dict = {"attempts": attempts, "last_error": error[:2000], "last_status_code": status_code}
    if retry and now < deadline:
        fields["next_attempt_at"] = min(now + timedelta(seconds=wait), deadline)
    else:
        fields["status"] = WebhookDelivery.Status.FAILED
        if retry:
            fields["last_error"] = (
                f"{fields['last_error']}; gave up after {attempts} tries, past BRIDGE_WEBHOOK_RETRY_S"
            )
    kept = _held(delivery, lease).update(**fields, lease=None, lease_until=None)
    return wait if kept and "status" not in fields else None


def backoff_s(attempts: int) -> float:
    """The wait after the `attempts`th failed try: BRIDGE_WEBHOOK_BACKOFF_S doubling, each drawn from its upper half."""
    backoff = Backoff(settings.BRIDGE_WEBHOOK_BACKOFF_S, MAX_BACKOFF_S)
    backoff.tries = max(0, attempts - 1)
    return backoff.next()


def release_delivery(delivery: WebhookDelivery, lease: uuid.UUID) -> None:
    """Hand a claimed row back untried-for-good (its sender is stopping), so the next process sends it at once rather
    than after the lease."""
    _held(delivery, lease).update(lease=None, lease_until=None)


def _held(delivery: WebhookDelivery, lease: uuid.UUID) -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.filter(pk=delivery.pk, lease=lease, status=WebhookDelivery.Status.PENDING)


def give_up_overdue() -> int:
    """Rows not delivered within BRIDGE_WEBHOOK_RETRY_S of their event that no try will end (their webhook was down
    all along, and the loop tried others of its rows meanwhile): failed, saying so. A lease's length after the
    deadline, so a last try set for the deadline itself is made first."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.BRIDGE_WEBHOOK_RETRY_S + lease_s())
    return (
        WebhookDelivery.objects.unclaimed(now)
        .filter(created_at__lt=cutoff)
        .update(
            status=WebhookDelivery.Status.FAILED,
            last_error=f"not delivered within BRIDGE_WEBHOOK_RETRY_S ({settings.BRIDGE_WEBHOOK_RETRY_S} s): gave up",
        )
    )


def prune_deliveries() -> int:
    """The delivery log keeps what ended for BRIDGE_WEBHOOK_KEEP_DAYS."""
    cutoff = timezone.now() - timedelta(days=settings.BRIDGE_WEBHOOK_KEEP_DAYS)
    ended = WebhookDelivery.objects.exclude(status=WebhookDelivery.Status.PENDING).filter(created_at__lt=cutoff)
    return ended.delete()[0]
