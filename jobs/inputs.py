"""The one check for text and numbers that arrive from outside, whatever the interface (REST, MCP, pages, sockets).

Text that cannot be stored (a NUL byte: PostgreSQL refuses it) or encoded (a lone surrogate: UTF-8 has none) and
numbers outside what the database holds are refused here with a 4xx naming the field, before they reach the
database or the file system and come back as a 500.
"""

import os

from jobs.errors import InvalidInput

MAX_INT = 2**31 - 1  # what every database column Bridge counts with holds
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255  # one path component, on every file system Bridge runs on


def check_text(name: str, value: object, max_chars: int | None = None) -> str:
    """`value` as text that can be stored and sent on, or InvalidInput naming the field and what is wrong."""
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be text, not {type(value).__name__}", field=name)
    if "\x00" in value:
        raise InvalidInput(f"{name} contains a NUL character, which cannot be stored", field=name)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{name} is not valid Unicode text (a lone surrogate at position {exc.start})", field=name
        ) from None
    if max_chars is not None and len(value) > max_chars:
        raise InvalidInput(f"{name} is {len(value)} characters, over the limit of {max_chars}", field=name)
    return value


def check_int(name: str, value: object, low: int = 0, high: int = MAX_INT) -> int:
    """A whole number from low to high (booleans are not numbers here), or InvalidInput naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"{name} must be a whole number from {low} to {high}, not {value!r}", field=name)
    return value


def check_path_text(name: str, value: object) -> str:
    """Text that the file system can take as a path: storable, and no name or whole path longer than it allows."""
    text = check_text(name, value)
    encoded = os.fsencode(text) if text else b""
    if len(encoded) > MAX_PATH_BYTES:
        raise InvalidInput(f"{name} is {len(encoded)} bytes long, over the {MAX_PATH_BYTES} a path may be", field=name)
    longest = max((len(part) for part in encoded.replace(b"\\", b"/").split(b"/")), default=0)
    if longest > MAX_NAME_BYTES:
        raise InvalidInput(
            f"{name} has a name of {longest} bytes, over the {MAX_NAME_BYTES} one file or folder name may be",
            field=name,
        )
    return text
