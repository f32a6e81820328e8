"""Who is calling: a bearer token (checked in constant time) or a logged-in user, for every interface.

Tokens are made and revoked in jobs.actions.tokens; this module only reads them.
"""

import base64
import binascii
import hmac
from collections.abc import Callable, Mapping
from functools import wraps
from typing import NamedTuple
from urllib.parse import parse_qsl

from django.contrib.auth import get_user_model
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.utils.datastructures import CaseInsensitiveMapping
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from jobs import actions
from jobs.actions import rows, tokens
from jobs.actions.tokens import PREFIX_LEN, could_be_token, token_digest
from jobs.core.access import Caller, Scope
from jobs.core.errors import Unauthenticated
from jobs.core.hints import manage_command
from jobs.models import ApiToken, Task

# Where programs often put a token that Bridge does not read there: headers other APIs take one in, and query
# parameters (matched in any case). A request without Authorization that sent something in one of them gets a 401
# naming where it was seen and where a token belongs, never repeating what was sent.
MISPLACED_HEADERS = ("X-API-Key", "X-Auth-Token", "X-Access-Token", "X-Token", "API-Key", "Token")
MISPLACED_QUERY = ("token", "access_token", "api_key", "apikey", "auth_token", "key")


class Misplaced(NamedTuple):
    """Where a request sent a credential that Bridge does not read there."""

    where: str  # for people: "the X-API-Key header", "the URL's query parameter 'token'"
    in_url: bool  # then it may be in logs and histories too


def verify_token(token: str) -> ApiToken | None:
    if not could_be_token(token):
        return None
    digest = token_digest(token)
    match = None
    for row in rows.select(ApiToken, prefix=token[:PREFIX_LEN], revoked_at=None):
        if hmac.compare_digest(row.hash, digest):
            match = row
    if match is not None:
        actions.mark_token_used(match)
    return match


def token_from_header(header: str) -> str | None:
    """Bearer <token>, or HTTP Basic with the token as the password (any user name), as hbridge clients send."""
    scheme, _, value = header.strip().partition(" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme == "bearer" and value:
        return value
    if scheme == "basic" and value:
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None


def identify(authorization: str, user=None) -> Caller | None:
    """Who is calling and what they may do: 'token:<name>' with the token's scope and roots for a valid token in the
    Authorization header, else 'user:<name>' (who may do everything) for a logged-in user, else None. REST, SSE,
    websockets, the pages and MCP over HTTP all ask this one function."""
    token = token_from_header(authorization)
    if token:
        row = verify_token(token)
        return row.caller() if row else None
    if user is not None and user.is_authenticated:
        return Caller(f"user:{user.get_username()}")
    return None


def authenticate(request: HttpRequest) -> Caller | None:
    return identify(request.headers.get("Authorization", ""), getattr(request, "user", None))


def misplaced_credential(headers: Mapping[str, str], query: Mapping[str, str]) -> Misplaced | None:
    """Where this request sent a credential that Bridge does not read there, for the 401 to name (None: nowhere):
    the first of MISPLACED_HEADERS (`headers` must match names in any case, as Django's do), then MISPLACED_QUERY."""
    for name in MISPLACED_HEADERS:
        if str(headers.get(name) or "").strip():
            return Misplaced(f"the {name} header", in_url=False)
    sent = {name.lower() for name, value in query.items() if str(value).strip()}
    for name in MISPLACED_QUERY:
        if name in sent:
            return Misplaced(f"the URL's query parameter '{name}'", in_url=True)
    return None


def scope_headers(scope: dict) -> CaseInsensitiveMapping:
    """An ASGI request's headers by name, in any case (as Django's request.headers are)."""
    return CaseInsensitiveMapping(
        {name.decode("latin1"): value.decode("latin1") for name, value in scope.get("headers", [])}
    )


def misplaced_in(scope: dict) -> Misplaced | None:
    """misplaced_credential for an ASGI request (a websocket, /mcp): its headers and its query parameters (of a
    name sent twice, one that holds something)."""
    query = parse_qsl(scope.get("query_string", b"").decode("latin1"))
    return misplaced_credential(scope_headers(scope), {name: value for name, value in query if value.strip()})


def refusal_of(request: HttpRequest) -> Unauthenticated:
    """`refusal` for a request let in by nothing: its Authorization header, and any token sent where Bridge does not
    look for one."""
    return refusal(request.headers.get("Authorization", ""), misplaced_credential(request.headers, request.GET))


def require(request: HttpRequest, needed: Scope) -> Caller:
    """The caller of a plain view (the stream, the pages' buttons), who must hold `needed`: Unauthenticated (401)
    for nobody, Refused (403 scope_missing) for a token without that scope."""
    caller = authenticate(request)
    if caller is None:
        raise refusal_of(request)
    tokens.require_scope(caller, needed)
    return caller


def task_for(request: HttpRequest, task_id: str, needed: Scope) -> tuple[Caller, Task]:
    """The caller of a plain view that acts on one task, holding `needed`, and that task, if the caller may see it."""
    caller = require(request, needed)
    return caller, tokens.check_sees(caller, actions.get_task(task_id))


def refusal(authorization: str = "", misplaced: Misplaced | None = None) -> Unauthenticated:
    """Why a request with this Authorization header was not let in, and what to do: no credentials, a credential
    only where Bridge does not look (`misplaced`, from `misplaced_credential`), a header in no form Bridge reads, a
    token Bridge never made, or a revoked one. All are 401 `unauthenticated`; `reason` tells them apart for programs.
    Reads the database when a token was sent: call it from sync code."""
    make = manage_command("token", "create", "NAME")
    if not authorization.strip() and misplaced is not None:
        return misplaced_refusal(misplaced, make)
    if not authorization.strip():
        return Unauthenticated(
            f"authentication required: send 'Authorization: Bearer <token>' (make a token with: {make}) or log in",
            reason="missing",
        )
    token = token_from_header(authorization)
    if token is None:
        return Unauthenticated(
            "the Authorization header is neither 'Bearer <token>' nor HTTP Basic with the token as the password: "
            f"send 'Authorization: Bearer <token>' (make a token with: {make})",
            reason="malformed",
        )
    revoked = ApiToken.objects.filter(prefix=token[:PREFIX_LEN], revoked_at__isnull=False)
    for row in revoked if could_be_token(token) else ():
        if hmac.compare_digest(row.hash, token_digest(token)):
            return Unauthenticated(
                f"this token was revoked ({row.revoked_at:%Y-%m-%d %H:%M} UTC) and no longer works: make a new one "
                f"with: {make}",
                reason="revoked",
            )
    return Unauthenticated(
        "no such token: Bridge made no token like the one sent (was it copied whole, and for this Bridge?); "
        f"see the tokens it has with: {manage_command('token', 'list')}, or make one with: {make}",
        reason="no_such_token",
    )


def misplaced_refusal(misplaced: Misplaced, make: str) -> Unauthenticated:
    """A credential sent only where Bridge does not look: where it was seen, where it belongs, and, for a URL, that
    it may now be in logs and histories."""
    exposed = (
        "; a URL is kept in logs and histories: if this was a real token, revoke it "
        f"({manage_command('token', 'revoke', 'NAME')}) and make a new one ({make})"
        if misplaced.in_url
        else ""
    )
    return Unauthenticated(
        f"a credential was sent in {misplaced.where}, where Bridge does not read one: send the token in the "
        f"Authorization header, as 'Authorization: Bearer <token>' (or HTTP Basic with the token as the password)"
        f"{exposed}",
        reason="misplaced",
        seen_in=misplaced.where,
    )


def unauthorized(refused: Unauthenticated | None = None) -> JsonResponse:
    """The 401 every HTTP interface sends: `refused` (from `refusal`) or, without one, "authentication required"."""
    refused = refused or refusal()
    response = JsonResponse(refused.as_dict(), status=refused.http_status)
    response["WWW-Authenticate"] = 'Bearer realm="bridge"'
    return response


def login_required_page(request: HttpRequest) -> HttpResponse:
    """A logged-out browser is sent to log in (and back); a program gets the 401 saying why."""
    if not request.headers.get("Authorization") and "text/html" in request.headers.get("Accept", ""):
        return redirect_to_login(request.get_full_path())
    return unauthorized(refusal_of(request))


def token_or_login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """For plain views (the API docs): a token or a logged-in user; else a browser is sent to log in, and a program
    gets a 401."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if authenticate(request) is None:
            return login_required_page(request)
        return view(request, *args, **kwargs)

    return wrapper


def login_user():
    """(the user a one-time login link logs in, whether it was just made): the first active superuser; on a fresh
    install one named 'admin' without a password is made, so the link is how a person first gets in."""
    users = get_user_model().objects
    user = users.filter(is_superuser=True, is_active=True).order_by("pk").first()
    if user is not None:
        return user, False
    return users.create_superuser("admin", email="", password=None), True


def login_link_path(user) -> str:
    """A path that logs `user` in once: the token covers last_login, which logging in changes."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return reverse("login-link", args=[uid, default_token_generator.make_token(user)])
