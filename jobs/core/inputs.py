"""The one check for text and numbers that arrive from outside, whatever the interface (REST, MCP, pages, sockets).

Text that cannot be stored (a NUL byte: PostgreSQL refuses it) or encoded (a lone surrogate: UTF-8 has none) and
numbers outside what the database holds are refused here with a 4xx naming the field, before they reach the
database or the file system and come back as a 500.
"""

import json
import math
import os

from jobs.core.errors import InvalidInput

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


MAX_JSON_DEPTH = 64  # nesting an agent's tool input may have; deeper is refused before it reaches the database


def check_json(name: str, value: object, max_bytes: int) -> object:
    """A JSON value every database Bridge runs on can store: its strings and keys storable text (PostgreSQL's jsonb
    refuses \\u0000 too), its numbers finite, nested at most MAX_JSON_DEPTH deep, at most `max_bytes` as JSON."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise InvalidInput(f"{name} is nested more than {MAX_JSON_DEPTH} levels deep", field=name)
        if isinstance(item, str):
            check_text(name, item)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInput(f"{name} contains {item}, which JSON cannot carry", field=name)
        elif isinstance(item, dict):
            stack.extend((key, depth + 1) for key in item)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
        elif item is not None and not isinstance(item, bool | int | float):
            raise InvalidInput(f"{name} holds a {type(item).__name__}, which is not JSON", field=name)
    try:
        size = len(json.dumps(value, ensure_ascii=False).encode())
    except ValueError:  # a whole number with more digits than Python turns into text (4,300)
        raise InvalidInput(f"{name} holds a number too long to be sent on", field=name) from None
    if size > max_bytes:
        raise InvalidInput(f"{name} is {size} bytes as JSON, over the limit of {max_bytes}", field=name)
    return value
