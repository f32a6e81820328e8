"""Text from data, made safe for a terminal or a planner: whatever a management command prints that it did not write
itself (a token's name, a path, a supervisor's name, a config file's lines), and whatever an MCP reply carries from an
agent (jobs/mcp/replies.py), passes through `printable`, so an escape sequence stored in it is shown, not obeyed, and
a line break in it cannot start a line of its own (docs/architecture.md, "Principles").

One rule says which characters a terminal may act on (`is_unsafe`): the control characters (C0 with tab and newline,
DEL, C1), the format characters (bidi overrides and isolates, zero-width joiners, the byte-order mark…), line and
paragraph separators, and code points that are surrogates, private or unassigned. Token names refuse them
(jobs.actions.tokens); printing escapes them.
"""

import re
import unicodedata

LINE_END = re.compile(r"(\r?\n)")
ASCII_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")  # the unsafe characters among ASCII: most text, read fast
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# For messages: what the refused characters are, in words a person recognises.
UNSAFE_IN_WORDS = (
    "control characters (C0 such as ESC, tab or newline; DEL; C1), format characters (bidi overrides and isolates, "
    "zero-width characters), line or paragraph separators, and private or unassigned code points"
)


def is_unsafe(char: str) -> bool:
    """Whether a terminal could act on `char` (move the cursor, set the title, reorder text) or show it as nothing."""
    return unicodedata.category(char) in UNSAFE_CATEGORIES


def escaped(char: str) -> str:
    """`char` as Python writes it in a string literal: `\\x1b`, `\\n`, `\\u202e`, `\\U000e0001`."""
    return char.encode("unicode_escape", "backslashreplace").decode("ascii")


def printable(text: object, *, multiline: bool = False, keep: str = "") -> str:
    """`text` with every unsafe character but those in `keep` escaped visibly; with `multiline`, its line ends
    ("\\n", "\\r\\n") kept as they are (for a diff or a report of many lines, whose lines are still each escaped)."""
    text = str(text)
    if multiline:  # the pieces between line ends, each escaped, and the line ends themselves
        pieces = LINE_END.split(text)
        return "".join(piece if index % 2 else printable(piece, keep=keep) for index, piece in enumerate(pieces))
    if text.isascii():
        return ASCII_UNSAFE.sub(lambda found: _shown(found.group(), keep), text)
    return "".join(_shown(char, keep) if is_unsafe(char) else char for char in text)


def _shown(char: str, keep: str) -> str:
    return char if char in keep else escaped(char)


def first_unsafe(text: str) -> tuple[int, str] | None:
    """The position and the character of the first unsafe character in `text`, if any."""
    for position, char in enumerate(text):
        if is_unsafe(char):
            return position, char
    return None


CATEGORY_WORDS = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Cs": "a surrogate",
    "Co": "a private-use character",
    "Cn": "an unassigned code point",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


def describe(char: str) -> str:
    """A character named for a message: `U+202E (RIGHT-TO-LEFT OVERRIDE)`, or `U+001B (a control character)` where
    Unicode gives it no name."""
    name = unicodedata.name(char, "") or CATEGORY_WORDS.get(unicodedata.category(char), "")
    return f"U+{ord(char):04X}" + (f" ({name})" if name else "")
