"""Odd text and numbers from outside get a clear 4xx naming the field, never a 500: generated inputs."""

import random

import pytest

from jobs.errors import InvalidInput, NotFound, Refused
from jobs.inputs import MAX_INT, check_int, check_path_text, check_text
from jobs.paths import resolve_cwd, resolve_readable

ODD = ["\x00", "a\x00b", "\ud800", "x\udfffy", "\udc80", "\U0010ffff", "é", "\u202e", "\n", "\t", " "]


def odd_texts(seed: int, count: int) -> list[str]:
    """Strings built from the characters that break storage or encoding, mixed with ordinary ones."""
    rng = random.Random(seed)
    pieces = [*ODD, "abc", "/", "..", "~", "%00", "\\"]
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 8))) for _ in range(count)]


@pytest.mark.parametrize("text", odd_texts(seed=1, count=200))
def test_text_is_taken_only_if_it_can_be_stored(text):
    storable = "\x00" not in text and not any(0xD800 <= ord(c) <= 0xDFFF for c in text)
    if storable:
        assert check_text("prompt", text) == text
    else:
        with pytest.raises(InvalidInput, match="^prompt "):
            check_text("prompt", text)


@pytest.mark.parametrize("value", [-1, MAX_INT + 1, 10**40, True, False, 1.5, "3", None])
def test_numbers_out_of_range_or_of_the_wrong_kind_are_refused(value):
    with pytest.raises(InvalidInput, match="^limit must be a whole number"):
        check_int("limit", value, 0, MAX_INT)


@pytest.mark.parametrize("name_bytes", [255, 256, 1000])
def test_path_names_longer_than_a_file_system_allows_are_refused(name_bytes):
    path = "/tmp/" + "n" * name_bytes
    if name_bytes <= 255:
        assert check_path_text("cwd", path) == path
    else:
        with pytest.raises(InvalidInput, match="^cwd has a name of"):
            check_path_text("cwd", path)


@pytest.mark.parametrize("raw", odd_texts(seed=2, count=100) + ["/" + "x" * 300, "/" + "a/" * 3000])
def test_any_cwd_or_read_path_is_refused_in_words_or_resolved(work_root, raw):
    """Whatever the text, confinement answers with a refusal naming the field, or a real path inside the roots."""
    for resolve, name in ((resolve_cwd, "cwd"), (resolve_readable, "path")):
        try:
            resolved = resolve(raw)
        except (InvalidInput, Refused, NotFound) as exc:
            assert exc.message.startswith((name, "path")), exc.message
        else:
            assert resolved == work_root or work_root in resolved.parents
