"""API tokens: 256 random bits, shown once, stored as SHA-256, checked in constant time."""

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable
from datetime import timedelta
from functools import wraps

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from jobs.models import ApiToken

TOKEN_PREFIX = "brg_"
PREFIX_LEN = len(TOKEN_PREFIX) + 8
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(name: str) -> tuple[ApiToken, str]:
    """Make a token; the plain text is returned once and never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(name=name, prefix=token[:PREFIX_LEN], hash=_digest(token))
    return row, token


def revoke_tokens(tokens: QuerySet) -> int:
    """Stop these tokens from working (the rows stay, for the record); returns how many were still active."""
    return tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


def verify_token(token: str) -> ApiToken | None:
    if not token.startswith(TOKEN_PREFIX) or len(token) < PREFIX_LEN + 16:
        return None
    digest = _digest(token)
    match = None
    for row in ApiToken.objects.filter(prefix=token[:PREFIX_LEN], revoked_at__isnull=True):
        if hmac.compare_digest(row.hash, digest):
            match = row
    now = timezone.now()
    if match is not None and (match.last_used_at is None or now - match.last_used_at > LAST_USED_RESOLUTION):
        # At most one write a minute per token: every request reads a token, and on SQLite a write takes the lock.
        ApiToken.objects.filter(pk=match.pk).update(last_used_at=now)
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


def identify(authorization: str, user=None) -> str | None:
    """Who is calling: 'token:<name>' for a valid token in the Authorization header, else 'user:<name>' for a
    logged-in user, else None. REST, SSE, websockets and MCP over HTTP all ask this one function."""
    token = token_from_header(authorization)
    if token:
        row = verify_token(token)
        return f"token:{row.name}" if row else None
    if user is not None and user.is_authenticated:
        return f"user:{user.get_username()}"
    return None


def authenticate(request: HttpRequest) -> str | None:
    return identify(request.headers.get("Authorization", ""), getattr(request, "user", None))


def unauthorized() -> JsonResponse:
    response = JsonResponse(
        {
            "error": "authentication required: send 'Authorization: Bearer <token>' (make a token with "
            "'python manage.py token create NAME') or log in"
        },
        status=401,
    )
    response["WWW-Authenticate"] = 'Bearer realm="bridge"'
    return response


def token_or_login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """For plain views (the API docs): a token or a logged-in user, else 401."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if authenticate(request) is None:
            return unauthorized()
        return view(request, *args, **kwargs)

    return wrapper
