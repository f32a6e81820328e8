"""One-tap decision links: absolute URLs on Bridge's own address (BRIDGE_PUBLIC_URL) that a notification carries so
a person can allow or deny one pending request from wherever they are, without logging in.

A link's token is signed with Bridge's secret key (Django's `signing`, salted for this use) over the task, the
request and the behaviour, and dies with the request: it expires when the request does, and once the request is
decided (by anyone) the link decides nothing more, so it is single-use. Opening a link never decides: the page it
opens shows the request and posts the decision back with the token (`decide_by_link`).
"""

from dataclasses import dataclass
from urllib.parse import quote

from django.conf import settings
from django.core import signing
from django.utils import timezone

from jobs.actions.permissions import decide_permission
from jobs.core.errors import Conflict, ErrorCode, InvalidInput
from jobs.core.vocabulary import DecidedVia, PermissionStatus
from jobs.models import PermissionRequest

SALT = "bridge.decision-link"
BEHAVIORS = ("allow", "deny")
LINK_PATH = "/decide/"


def decision_links(perm: PermissionRequest) -> dict[str, str]:
    """The Allow and Deny links of a pending request; {} for one that is not pending (nothing left to decide)."""
    if perm.status != PermissionStatus.PENDING:
        return {}
    base = settings.BRIDGE_PUBLIC_URL.rstrip("/")
    return {behavior: f"{base}{LINK_PATH}{quote(link_token(perm, behavior))}" for behavior in BEHAVIORS}


def link_token(perm: PermissionRequest, behavior: str) -> str:
    """The signed token of one behaviour on one request."""
    return signing.dumps({"request": perm.pk, "behavior": behavior}, salt=SALT, compress=True)


@dataclass(frozen=True)
class Link:
    """What a valid token names: the request (with its task) and the behaviour it offers."""

    request: PermissionRequest
    behavior: str


def read_link(token: str) -> Link:
    """The request and behaviour a token names, or the refusal a person can read: forged or damaged, gone, expired
    or already decided (then naming how)."""
    try:
        signed = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        raise InvalidInput("this decision link is not one Bridge made (it may have been cut short)") from None
    perm = PermissionRequest.objects.select_related("task").filter(pk=signed.get("request")).first()
    if perm is None or signed.get("behavior") not in BEHAVIORS:
        raise InvalidInput("this decision link names no permission request Bridge still has")
    if perm.status != PermissionStatus.PENDING:
        how = f" via {perm.decided_via}" if perm.decided_via else ""
        who = f" by {perm.decided_by}" if perm.decided_by not in ("", perm.decided_via) else ""
        raise Conflict(
            f"this request was already {perm.status}{how}{who}; the link decides nothing more",
            code=ErrorCode.ALREADY_DECIDED,
            status=perm.status,
        )
    if perm.expires_at is not None and perm.expires_at <= timezone.now():
        raise Conflict(
            "this request has expired: it is denied as nobody answered in time", code=ErrorCode.ALREADY_DECIDED
        )
    return Link(perm, signed["behavior"])


def decide_by_link(token: str, message: str = "", by: str = "") -> PermissionRequest:
    """Record the decision a link offers (recorded with decided_via=link), exactly once."""
    link = read_link(token)
    return decide_permission(
        link.request.task,
        behavior=link.behavior,
        request_id=link.request.request_id,
        message=message,
        by=by or "link",
        via=DecidedVia.LINK,
    )
