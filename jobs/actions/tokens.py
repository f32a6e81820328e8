"""API tokens: made (256 random bits, shown once, stored as SHA-256), revoked, and marked as used."""

import hashlib
import re
import secrets
from datetime import timedelta
from typing import cast

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from jobs.core.errors import Conflict, ErrorCode, InvalidInput
from jobs.core.hints import manage_command
from jobs.core.inputs import check_text
from jobs.models import ApiToken

TOKEN_PREFIX = "brg_"
PREFIX_LEN = len(TOKEN_PREFIX) + 8
LAST_USED_RESOLUTION = timedelta(minutes=1)
MAX_NAME_CHARS = cast(int, ApiToken._meta.get_field("name").max_length)  # a CharField's: always set
TOKEN_SHAPE = re.compile(r"brg_[A-Za-z0-9_-]{16,64}")


def could_be_token(text: str) -> bool:
    """Whether `text` has the shape of a token Bridge makes: anything else (NUL bytes, other alphabets, any length)
    is refused before it reaches a query."""
    return TOKEN_SHAPE.fullmatch(text) is not None


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(name: str) -> tuple[ApiToken, str]:
    """Make a token; the plain text is returned once and never stored. A name an active token has is refused; a
    revoked token's name may be used again (`free_name`)."""
    name = check_text("the token name", name, MAX_NAME_CHARS).strip()
    if not name:
        raise InvalidInput("give the token a name, e.g. 'hermes'", field="name")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        free_name(name)
        row = ApiToken.objects.create(name=name, prefix=token[:PREFIX_LEN], hash=token_digest(token))
    return row, token


def free_name(name: str) -> None:
    """Make `name` free for a new token: refused while an active token has it; a revoked one's row is renamed
    `name~<id>` (kept, for the record of when it was made, used and revoked)."""
    old = ApiToken.objects.select_for_update().filter(name=name).first()
    if old is None:
        return
    if old.revoked_at is None:
        raise Conflict(
            f"a token named {name!r} is active: revoke it first ({manage_command('token', 'revoke', name)}) "
            "or pick another name",
            code=ErrorCode.TOKEN_NAME_TAKEN,
        )
    suffix = f"~{old.pk}"
    ApiToken.objects.filter(pk=old.pk).update(name=name[: MAX_NAME_CHARS - len(suffix)] + suffix)


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
