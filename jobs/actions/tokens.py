"""API tokens: made (256 random bits, shown once, stored as SHA-256), revoked, and marked as used."""

import hashlib
import secrets
from datetime import timedelta

from django.db.models import QuerySet
from django.utils import timezone

from jobs.models import ApiToken

TOKEN_PREFIX = "brg_"
PREFIX_LEN = len(TOKEN_PREFIX) + 8
LAST_USED_RESOLUTION = timedelta(minutes=1)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(name: str) -> tuple[ApiToken, str]:
    """Make a token; the plain text is returned once and never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiToken.objects.create(name=name, prefix=token[:PREFIX_LEN], hash=token_digest(token))
    return row, token


def revoke_tokens(tokens: QuerySet) -> int:
    """Stop these tokens from working (the rows stay, for the record); returns how many were still active."""
    return tokens.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


def mark_token_used(token: ApiToken) -> None:
    """Record when a token was last used, at most once a minute: every request reads a token, and on SQLite a
    write takes the lock."""
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
