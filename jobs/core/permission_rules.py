"""Permission rules in Claude Code's own syntax (`Bash(npm run test:*)`, `Edit(src/**)`, `WebFetch(domain:x.org)`,
`mcp__github`), and whether one matches a tool call an agent asks to make. Pure: text in, yes or no out; no file
system, no settings, no clock (the home directory, for `~/` rules, is read from the environment).

Claude Code documents (its permissions page, as of CLI 2.1.332, and the validator and matchers in that CLI's bundle):

- A rule is `Tool` or `Tool(specifier)`; `Tool(*)` is `Tool`; `Tool()` is an error; MCP rules take no parentheses;
  tool names without `_` start with a capital letter.
- Bash: `Bash(npm run build)` is that exact command; a `*` anywhere matches any characters, spaces included
  (`Bash(git * main)`); a single trailing ` *`, or the older `:*` suffix, also matches the command alone and keeps a
  word boundary (`Bash(ls *)` matches `ls` and `ls -la`, not `lsof`; `Bash(ls*)` matches all three); `:*` counts only
  at the end. Compound commands (`&&`, `||`, `;`, `|`, `|&`, `&`, newlines) are allowed only when a rule matches each
  subcommand. The wrappers `timeout`, `time`, `nice`, `nohup`, `stdbuf` and a flagless `xargs` are stripped before
  matching; exec wrappers (`watch`, `setsid`, `ionice`, `flock`) and `find` with `-exec` or `-delete` are approved
  only by an exact rule.
- Read and Edit: gitignore globs (`*` within a path segment, `**` across them); `//path` is absolute, `~/path` from
  the home directory, `/path` from the settings' root (for Bridge: the task's cwd), `path` or `./path` from the cwd;
  a bare name (`.env`, `*.py`) matches at any depth below the cwd; a rule matches only below its anchor. Edit rules
  cover every file-editing tool (Edit, Write, MultiEdit, NotebookEdit), Read rules the reading ones (Read, and on a
  best-effort basis Grep and Glob), and a Read deny rule also blocks the Edit tool. `Write(path)`, `NotebookEdit(path)`
  and `Glob(path)` are accepted by Claude Code but never matched: Bridge refuses them, naming the rule to write.
- WebFetch: `domain:host`, case-insensitive, a trailing dot ignored; `*.example.com` is any subdomain at any depth,
  not `example.com`; a `*` elsewhere stays within one label; `domain:*` is every host, like a bare `WebFetch`.
- MCP: `mcp__server` is every tool of that server, `mcp__server__*` the same, `mcp__server__get_*` a glob over its
  tools, `mcp__server__tool` one tool. Agent (and the older Task): `Agent(Explore)` names a subagent.

Where the documentation leaves a reading open, the rule's decision picks the safer one, so `matches` takes it:
an allow rule matches less, a deny or ask rule more.

- A compound command: an allow rule must match every part, nested ones (`$(…)`, backticks, `<(…)`, `sh -c '…'`,
  `eval`) included; a deny or ask rule, any part. What cannot be split safely (unbalanced quotes, heredocs, `case`,
  `for`, `$'…'`, arithmetic) matches no allow rule but a bare `Bash`, and a deny or ask rule when the rule's words
  appear in it in order.
- An allow rule never matches a part that redirects output into a file (`> f`, `>> f`, `&> f`; `/dev/null` and
  `2>&1` are fine), whose command name the shell computes (`$CMD`, `$(which x)`, `{rm,-rf}`), or a wrapper with
  options it does not know (only an exact rule then); a deny or ask rule matches a part from any word on
  (`sudo rm -rf x` meets `Bash(rm *)`), with quotes removed or kept.
- Paths: an allow rule's `*` stays in its segment and a directory's match does not carry to what is inside it
  (`Edit(src/*)` is not `src/a/b.py`), `dir/**` and `./name` are anchored at the cwd; for a deny or ask rule a
  matching directory covers everything in it, as in gitignore, and `dir/**`, `./name` match at any depth. A path
  that cannot be read (missing, relative to an unknown home, not text) matches no allow rule and every deny rule.
- Grep and Glob: a `Read(dir/**)` allow rule matches a search rooted in `dir`; a deny rule, a search whose root and
  the rule's reach overlap.
- URLs: a host is read only from plain `http(s)://host` forms; a URL with a backslash, a percent-encoded or non-ASCII
  host matches no allow rule and every deny rule.

Hermes Agent over ACP (jobs/supervision/runners/acp.py) sends `PermissionAsk(tool_name=<title>, tool_input=<rawInput>)`.
Hermes 0.19 asks for two things: a dangerous command, title `"<description>: <command>"` (or the command),
rawInput `{"command", "description"}`, kind `execute`; and a file edit, title `"Approve edit: <path>"`, rawInput
`{"tool": "write_file" | "patch", "arguments": {"path", …}}`, kind `edit`. Bridge recognises them by those shapes
(or by a tool name that is an ACP kind, when a title is missing): `Bash(…)` rules match the command, `Edit(…)` rules
the path, and a bare ACP kind (`execute`, `edit`, …) matches that kind's requests. Gemini CLI's and Qwen Code's runners
give theirs the same shapes where they can: a command `{command, description}` titled the command or
`"<command> (<description>)"`, and a file write `{file_path, content}` titled `"Writing to <file>"`.
"""

import os
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import urlsplit

Decision = Literal["allow", "ask", "deny"]
DECISIONS: tuple[Decision, ...] = ("allow", "ask", "deny")


class RuleError(ValueError):
    """A pattern that cannot be parsed; str() says why, for a person."""


@dataclass(frozen=True)
class Pattern:
    tool: str
    specifier: str | None
    text: str


def parse(text: str) -> Pattern:
    """The rule `text` names, normalised (`Bash(*)` is `Bash`, runs of spaces in a command are one), or RuleError."""
    if not isinstance(text, str):
        raise RuleError("a permission rule is text, such as Bash(git status) or Read(src/**)")
    rule = text.strip()
    if not rule:
        raise RuleError("a permission rule cannot be empty: name a tool, such as Bash, or Read(src/**)")
    if "\x00" in rule:
        raise RuleError(f"{rule!r} contains a NUL character")
    tool, specifier = _split_rule(rule)
    _check_tool_name(tool)
    matcher = _compiled(tool, specifier)
    specifier = matcher.specifier
    return Pattern(tool, specifier, tool if specifier is None else f"{tool}({specifier})")


def matches(pattern: Pattern, tool_name: str, tool_input: dict, cwd: str, decision: Decision = "allow") -> bool:
    """Whether `pattern` covers the call of `tool_name` with `tool_input` in `cwd`, read as a rule of `decision`:
    where a reading is unsure, an allow rule matches less and a deny or ask rule more (see the module's docstring)."""
    return Call(tool_name, tool_input, cwd).matched_by(pattern, decision)


def approving(patterns: Iterable[Pattern], tool_name: str, tool_input: dict, cwd: str) -> list[Pattern]:
    """The allow rules that together approve a call, most specific first; [] when they do not. Claude Code's reading
    of a compound command: each part needs an allow rule of its own, not necessarily the same one, so
    `git status && npm test` is approved by `Bash(git *)` and `Bash(npm test)` together (one rule alone, by
    `matches`, must cover every part)."""
    return Call(tool_name, tool_input, cwd).approved_by(patterns)


class Call:
    """A tool call read once for the many rules one request meets (jobs/actions/rules.py, `decide`): its command is
    taken apart, its path resolved and its URL's host read once, not once for every rule as `matches` would."""

    def __init__(self, tool_name: str, tool_input: dict, cwd: str) -> None:
        self.request = _request(tool_name, tool_input if isinstance(tool_input, dict) else {}, cwd)

    def matched_by(self, pattern: Pattern, decision: Decision = "allow") -> bool:
        """Whether `pattern`, read as a rule of `decision`, covers the call (`matches`)."""
        if decision not in DECISIONS:
            raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, not {decision!r}")
        return _compiled(pattern.tool, pattern.specifier).matches(self.request, decision != "allow")

    def approved_by(self, patterns: Iterable[Pattern]) -> list[Pattern]:
        """The allow rules among `patterns` that together approve the call, most specific first (`approving`)."""
        request = self.request
        rules = [(_compiled(pattern.tool, pattern.specifier), pattern) for pattern in patterns]
        parts = request.parts
        if not parts:
            ranked = sorted(rules, key=_by_specificity, reverse=True)
            return next(([pattern] for matcher, pattern in ranked if matcher.matches(request, False)), [])
        able = [rule for rule in rules if _may_allow_a_part(rule[0], request)]
        able.sort(key=_by_specificity, reverse=True)
        chosen: list[tuple[_Matcher, Pattern]] = []
        for part in parts:
            found = _first_allowing(able, request, part)
            if found is None:
                return []
            if found not in chosen:
                chosen.append(found)
        return [pattern for _, pattern in sorted(chosen, key=_by_specificity, reverse=True)]


def _by_specificity(rule: tuple["_Matcher", Pattern]) -> int:
    return rule[0].specificity


def _may_allow_a_part(matcher: "_Matcher", request: "_Request") -> bool:
    """Whether the rule can allow any part of the request's command: a Bash rule only when its `needle` is in it."""
    if isinstance(matcher, _CommandMatcher):
        return matcher.needle in request.spoken
    return isinstance(matcher, _WholeTool) and matcher.matches(request, False)


def _first_allowing(
    ranked: list[tuple["_Matcher", Pattern]], request: "_Request", part: "_Command"
) -> tuple["_Matcher", Pattern] | None:
    """The first rule of `ranked` that allows `part` of the request's command (for a whole tool: all of it)."""
    for rule in ranked:
        matcher = rule[0]
        if matcher.part_allows(part) if isinstance(matcher, _CommandMatcher) else matcher.matches(request, False):
            return rule
    return None


def specificity(pattern: Pattern) -> int:
    """Higher is more specific: a whole tool (0), then a pattern (a prefix, a wildcard, a glob), then an exact
    command, path, host or MCP tool; within a kind, the more literal characters the higher."""
    return _compiled(pattern.tool, pattern.specifier).specificity


def rules_for(tool_name: str, tool_input: dict, cwd: str, decision: Decision, relative: bool) -> list[Pattern]:
    """The narrowest rules that decide this very call again, for a decision to remember: one exact `Bash(…)` rule
    per part of a command (an allow needs each part covered), the file's path (`Edit(/a.py)` below the cwd when
    `relative`, else `Edit(//abs/a.py)`), a search's directory (`Read(dir/**)`), the URL's host, the tool itself.
    RuleError, naming the rule to write instead, when no narrower rule than the whole tool can decide it."""
    request = _request(tool_name, tool_input if isinstance(tool_input, dict) else {}, cwd)
    if request.kind == "shell":
        texts = _command_rules(request.subject, decision)
    elif request.kind in ("edit", "read", "search"):
        texts = [_path_rule(request, relative)]
    elif request.kind == "fetch":
        host = url_host(request.subject)
        if host is None:
            raise RuleError("Bridge cannot read a plain http(s) host in this URL: name the rule, e.g. WebFetch")
        texts = [f"WebFetch(domain:{host})"]
    elif request.kind == "agent":
        texts = [f"Agent({request.subject})" if isinstance(request.subject, str) and request.subject else "Agent"]
    else:
        texts = [request.hermes_kind or request.tool]
    try:
        patterns = [parse(text) for text in dict.fromkeys(texts)]
    except RuleError as error:
        raise RuleError(f"{error}; so name the rule to remember") from None
    if decision == "allow":
        decides = bool(approving(patterns, tool_name, tool_input, cwd))
    else:
        decides = all(matches(pattern, tool_name, tool_input, cwd, decision) for pattern in patterns)
    if not decides:
        raise RuleError("Bridge could not write a rule that decides this very request: name the rule")
    return patterns


def _command_rules(command: object, decision: Decision) -> list[str]:
    if not isinstance(command, str) or not command.strip():
        raise RuleError("the request names no command: name the rule, e.g. Bash")
    parts = _split(command)
    if not parts:
        raise RuleError("Bridge cannot take this command apart safely, so only Bash covers it: name the rule")
    if decision != "allow" and len(parts) > 1:
        raise RuleError("this command has several parts: name the rule for the part to refuse, e.g. Bash(rm -rf build)")
    texts = []
    for part in parts:
        if part.writes_file or not part.words or part.words[0].dynamic:
            why = "redirects its output into a file" if part.writes_file else "has a command name the shell computes"
            raise RuleError(f"{_text(part.words)!r} {why}, which no allow rule but a bare Bash covers: name the rule")
        texts.append(f"Bash({_text(part.words)})")
    return texts


def _path_rule(request: "_Request", relative: bool) -> str:
    subject = request.subject
    if request.kind == "search":
        search = subject if isinstance(subject, dict) else {}
        subject = search.get("path") or request.cwd
    path = _resolved(subject, request.cwd)
    if path is None:
        raise RuleError("the request names no absolute or cwd-relative path: name the rule, e.g. Read(src/**)")
    below = _below(path, posixpath.normpath(request.cwd)) if relative and request.cwd.startswith("/") else None
    written = re.sub(r"([*?\[\]\\()])", r"\\\1", path.lstrip("/") if below is None else below)
    if written.endswith((" ", "\t")):
        written = written[:-1] + f"[{written[-1]}]"  # a rule's text is stripped: a last blank is written as a class
    anchored = "//" + written if below is None else "/" + written
    if request.kind == "search":
        return f"Read({anchored.rstrip('/')}/**)" if written else "Read(//**)" if below is None else "Read(/**)"
    return f"{'Edit' if request.kind == 'edit' else 'Read'}({anchored})"


# --- the rule's text -------------------------------------------------------------------------------------------

_TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_MCP_NAME = re.compile(r"mcp__(?P<server>[A-Za-z0-9.-]+(?:_[A-Za-z0-9.-]+)*)(?:__(?P<tool>[A-Za-z0-9_.*-]+))?")
# The kinds of Agent Client Protocol tool calls (ToolKind), which Hermes' permission requests carry.
ACP_KINDS = frozenset({"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"})
_NEVER_MATCHED = {"Write": "Edit", "NotebookEdit": "Edit", "MultiEdit": "Edit", "Glob": "Read", "NotebookRead": "Read"}
_TIERS = 10_000  # specificity: a tier's worth of literal characters


def _split_rule(rule: str) -> tuple[str, str | None]:
    opened, closed = rule.find("("), rule.rfind(")")
    if opened < 0 and closed < 0:
        return rule, None
    if opened < 0:
        raise RuleError(f'{rule!r} has a ")" with no "(" before it')
    tool = rule[:opened].strip()
    if not tool:
        raise RuleError(f"{rule!r} names no tool before its parenthesis: write it as Tool(pattern)")
    if closed != len(rule) - 1 or closed < opened:
        raise RuleError(f'{rule!r}: the "(" after {tool} must be closed by a ")" that ends the rule')
    content = rule[opened + 1 : closed].strip()
    if not content:
        raise RuleError(f"{rule!r} has empty parentheses: write {tool} for every use, or a pattern inside")
    if not _balanced(content):
        raise RuleError(f"{rule!r} has unbalanced parentheses inside; write a literal one as \\( or \\)")
    return tool, None if content == "*" else content


def _balanced(text: str) -> bool:
    depth, index = 0, 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 1
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return False
        index += 1
    return depth == 0


def _check_tool_name(tool: str) -> None:
    if tool.startswith("mcp__"):
        if _MCP_NAME.fullmatch(tool):
            return
        if "*" in tool.partition("__")[2].partition("__")[0]:
            raise RuleError(f"{tool!r}: a * in a tool name is taken only after mcp__<server>__, as in mcp__github__*")
        raise RuleError(f"{tool!r} is not an MCP rule: write mcp__<server>, mcp__<server>__<tool> or mcp__<server>__*")
    if "*" in tool:
        raise RuleError(f"{tool!r}: a * in a tool name is taken only after mcp__<server>__, as in mcp__github__*")
    if not _TOOL_NAME.fullmatch(tool):
        raise RuleError(f"{tool!r} is not a tool name: letters, digits, _ and -, such as Bash, Read or mcp__github")
    if "_" not in tool and tool[0].islower() and tool not in ACP_KINDS:
        raise RuleError(f"tool names start with a capital letter: write {tool[0].upper() + tool[1:]!r}, not {tool!r}")


# Room for many times the rules a user keeps (1,000 is the benchmark's load) so a live rule is never compiled again,
# bounded because every pattern sent to be parsed, refused ones included, lands here.
@lru_cache(maxsize=16_384)
def _compiled(tool: str, specifier: str | None) -> "_Matcher":
    """The matcher for a rule: parse() checks the rule with it, matches() and specificity() reuse it."""
    if specifier is None:
        return _McpMatcher(tool) if tool.startswith("mcp__") else _WholeTool(tool)
    if tool.startswith("mcp__"):
        raise RuleError(f"MCP rules take no pattern in parentheses: write {tool}, or mcp__<server>__* for all tools")
    if tool in ACP_KINDS:
        raise RuleError(f"the ACP kind {tool!r} takes no pattern: write Bash(…) for commands or Edit(…) for paths")
    if tool in _NEVER_MATCHED:
        instead = _NEVER_MATCHED[tool]
        raise RuleError(
            f"{tool}({specifier}) would never match: Claude Code checks only {instead}(path) rules for the tools that "
            f"{'edit' if instead == 'Edit' else 'read'} files. Write {instead}({specifier}) instead"
        )
    builders = {"Bash": _CommandMatcher, "Read": _PathMatcher, "Edit": _PathMatcher, "WebFetch": _DomainMatcher}
    builders |= {"Agent": _AgentMatcher, "Task": _AgentMatcher}
    if tool not in builders:
        raise RuleError(
            f"{tool}({specifier}): Bridge matches a pattern only for Bash, Read, Edit, WebFetch and Agent; "
            f"write {tool} to match every use of it"
        )
    return builders[tool](tool, specifier)


# --- the request ---------------------------------------------------------------------------------------------

_T = TypeVar("_T")


class _CachedProperty(Generic[_T]):
    """functools.cached_property without the lock Python 3.11 takes at every first read (3.12 dropped it): a request
    and its parts are read by one thread, and a compound command paid that lock a dozen times."""

    def __init__(self, compute: Callable[[Any], _T]) -> None:
        self.compute, self.name = compute, compute.__name__

    def __get__(self, instance: object, owner: type | None = None) -> _T:
        value = instance.__dict__[self.name] = self.compute(instance)
        return value


_EDITING = {"Edit": "file_path", "Write": "file_path", "MultiEdit": "file_path", "NotebookEdit": "notebook_path"}
_READING = {"Read": "file_path", "NotebookRead": "notebook_path"}
_SEARCHING = {"Grep", "Glob"}


@dataclass(frozen=True)
class _Request:
    """A tool call as the matchers see it: what it does (`kind`), and the text a rule is matched against."""

    tool: str
    kind: str  # shell, edit, read, search, fetch, agent, other
    subject: object  # the command, path or URL (None when missing or not usable); a search's whole input
    cwd: str
    hermes_kind: str = ""  # the ACP kind of a Hermes request

    # What the matchers read from the subject, worked out once for every rule a `Call` meets.
    @_CachedProperty
    def parts(self) -> list["_Command"] | None:
        """A command's simple commands (`_split`); None for no command, or one that cannot be split."""
        return _split(self.subject) if self.kind == "shell" and isinstance(self.subject, str) else None

    @_CachedProperty
    def spoken(self) -> str:
        """Every part of a command as a deny rule reads it (`_Command.views`), in one text: a Bash rule whose
        `needle` is not in it matches no part, to allow or to deny (`_CommandMatcher.matches`)."""
        return "\n".join(text for part in self.parts or () for text, _ in part.views)

    @_CachedProperty
    def computed_names(self) -> list["_Command"]:
        """The parts whose command name the shell computes (`$CMD x`)."""
        return [part for part in self.parts or () if part.words and part.words[0].dynamic]

    @_CachedProperty
    def target(self) -> str | None:
        return _resolved(self.subject, self.cwd)

    @_CachedProperty
    def cwd_base(self) -> str | None:
        return _base("cwd", self.cwd)

    @_CachedProperty
    def host(self) -> str | None:
        return url_host(self.subject)


def _request(tool_name: object, tool_input: dict, cwd: str) -> _Request:
    tool = tool_name if isinstance(tool_name, str) else ""
    if tool == "Bash":
        return _Request(tool, "shell", tool_input.get("command"), cwd)
    if tool in _EDITING:
        return _Request(tool, "edit", tool_input.get(_EDITING[tool]), cwd)
    if tool in _READING:
        return _Request(tool, "read", tool_input.get(_READING[tool]), cwd)
    if tool in _SEARCHING:
        return _Request(tool, "search", tool_input, cwd)
    if tool == "WebFetch":
        return _Request(tool, "fetch", tool_input.get("url"), cwd)
    if tool in ("Agent", "Task"):
        return _Request(tool, "agent", tool_input.get("subagent_type"), cwd)
    hermes_kind = _hermes_kind(tool, tool_input)
    if hermes_kind == "execute":
        return _Request(tool, "shell", tool_input.get("command"), cwd, hermes_kind)
    if hermes_kind == "edit":
        arguments = tool_input.get("arguments")
        path = arguments.get("path") if isinstance(arguments, dict) else tool_input.get("file_path")
        return _Request(tool, "edit", path, cwd, hermes_kind)
    return _Request(tool, "other", None, cwd, hermes_kind)


def _hermes_kind(tool: str, tool_input: dict) -> str:
    """The ACP kind of a Hermes permission request, from the shapes Hermes 0.19 sends (the module's docstring)."""
    if tool in ACP_KINDS:
        return tool
    command, description = tool_input.get("command"), tool_input.get("description")
    plain = set(tool_input) <= {"command", "description"}
    # titled the command (Hermes, Gemini CLI), "<description>: <command>" (Hermes) or "<command> (<description>)" (Qwen)
    titles = (command, f"{command} ({description})") if description else (command,)
    if isinstance(command, str) and command and plain and (tool in titles or tool.endswith(f": {command}")):
        return "execute"
    arguments, inner_tool = tool_input.get("arguments"), tool_input.get("tool")
    if tool.startswith("Approve edit: ") and isinstance(inner_tool, str) and isinstance(arguments, dict):
        return "edit"
    if tool.startswith("Writing to ") and isinstance(tool_input.get("file_path"), str):
        return "edit"
    return ""


# --- matchers --------------------------------------------------------------------------------------------------


class _Matcher:
    specifier: str | None = None
    specificity = 0

    def matches(self, request: _Request, restrictive: bool) -> bool:
        raise NotImplementedError


_KINDS = {"Bash": {"shell"}, "Edit": {"edit"}, "Read": {"read", "search"}, "WebFetch": {"fetch"}}


def _covers(tool: str, request: _Request, restrictive: bool) -> bool:
    """Whether a rule for `tool` speaks about `request`: Bash rules about every command (Hermes' too), Edit rules
    every edit, Read rules every read and search, and a deny or ask Read rule the Edit tool too (Claude Code's does)."""
    if request.kind in _KINDS.get(tool, set()):
        return True
    return tool == "Read" and restrictive and request.tool == "Edit"


class _WholeTool(_Matcher):
    def __init__(self, tool: str) -> None:
        self.tool = tool

    def matches(self, request: _Request, restrictive: bool) -> bool:
        if self.tool in ACP_KINDS:
            return request.hermes_kind == self.tool
        return request.tool == self.tool or _covers(self.tool, request, restrictive)


class _McpMatcher(_Matcher):
    def __init__(self, tool: str) -> None:
        found = _MCP_NAME.fullmatch(tool)
        assert found is not None  # parse() checked the name
        self.server, tool_glob = found["server"], found["tool"]
        self.tool_regex = None if tool_glob is None else re.compile(".*".join(map(re.escape, tool_glob.split("*"))))
        literal = len(tool) - tool.count("*")
        exact = tool_glob is not None and "*" not in tool_glob
        self.specificity = (2 if exact else 1 if tool_glob else 0) * _TIERS + min(literal, _TIERS - 1)

    def matches(self, request: _Request, restrictive: bool) -> bool:
        if not request.tool.startswith("mcp__"):
            return False
        server, separator, tool = request.tool[len("mcp__") :].partition("__")
        if server != self.server:
            return False
        return self.tool_regex is None or bool(separator and self.tool_regex.fullmatch(tool))


class _AgentMatcher(_Matcher):
    def __init__(self, tool: str, specifier: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", specifier):
            raise RuleError(
                f"{tool}({specifier}): name one subagent, such as {tool}(Explore); Bridge does not match "
                "parameters (Tool(param:value)) or wildcards here"
            )
        self.specifier = specifier
        self.specificity = 2 * _TIERS + min(len(specifier), _TIERS - 1)

    def matches(self, request: _Request, restrictive: bool) -> bool:
        return request.kind == "agent" and request.subject == self.specifier


# --- Bash: the rule ------------------------------------------------------------------------------------------


class _CommandMatcher(_Matcher):
    """`Bash(git status)` (exact), `Bash(npm run test:*)` (prefix), `Bash(git * main)` (wildcard)."""

    def __init__(self, tool: str, specifier: str) -> None:
        prefix = specifier.endswith(":*")
        body = specifier[:-2].rstrip() if prefix else specifier
        if prefix and not body:
            raise RuleError(f"Bash({specifier}): name a command before :*, such as Bash(npm run test:*)")
        if ":*" in body:
            raise RuleError(f"Bash({specifier}): :* counts only at the end of a pattern; write * for a wildcard")
        words = _rule_words(specifier, body)
        pieces = [_pieces(word) for word in words]
        wildcards = sum(piece is None for word in pieces for piece in word)
        if prefix and wildcards:
            raise RuleError(f"Bash({specifier}) mixes * with the :* suffix: write Bash({body} *) or drop the *")
        self.exact = not prefix and not wildcards
        self.leading_wildcard = bool(pieces[0]) and pieces[0][0] is None
        optional_rest = prefix or _one_trailing_wildcard(pieces)
        self.regex = re.compile(_command_regex(pieces, optional_rest), re.DOTALL)  # a quoted argument may hold newlines
        # text every match of the regex holds: a part that does not hold it is neither allowed nor denied by the rule
        self.needle = _needle(pieces, optional_rest)
        self.specifier = " ".join(words) + (":*" if prefix else "")
        literal = len(self.specifier) - wildcards - (2 if prefix else 0)
        self.specificity = (2 if self.exact else 1) * _TIERS + min(literal, _TIERS - 1)
        self.literal_chunks = [chunk for word in words for chunk in _unquoted(word).split("*") if chunk.strip()]

    def matches(self, request: _Request, restrictive: bool) -> bool:
        if request.kind != "shell":
            return False
        command = request.subject
        if not isinstance(command, str):
            return restrictive
        parts = request.parts
        if parts is None:
            return restrictive and self._appears_in(command)
        if self.needle not in request.spoken:
            # no part holds it: only a part whose command name the shell computes may still meet a deny rule
            return restrictive and any(self._appears_in(part.text) for part in request.computed_names)
        if restrictive:
            return any(map(self._part_restricts, parts))
        for part in parts:  # a loop, not all() over a generator: this runs for every allow rule a command meets
            if not self.part_allows(part):
                return False
        return bool(parts)

    def part_allows(self, part: "_Command") -> bool:
        if self.needle not in part.text or part.writes_file or not part.words or part.words[0].dynamic:
            return False
        if self.leading_wildcard and _ASSIGNMENT.match(part.words[0].value):
            return False  # `* --version` is not meant to approve `PAGER='sh -c …' git --version`
        if self.exact and self.regex.fullmatch(part.text):
            return True
        return part.unwrapped is not None and bool(self.regex.fullmatch(part.unwrapped))

    def _part_restricts(self, part: "_Command") -> bool:
        if not part.words:
            return False
        if part.words[0].dynamic and self._appears_in(part.text):
            return True
        for text, starts in part.views:
            if self.needle not in text:
                continue
            for start in starts[:1] if self.leading_wildcard else starts:
                if self.regex.fullmatch(text, start):
                    return True
        return False

    def _appears_in(self, command: str) -> bool:
        """For a command this module cannot take apart: whether the rule's words appear in it, in order."""
        text = " ".join(re.sub(r"['\"\\]", "", command).split())
        position = 0
        for chunk in (" ".join(chunk.split()) for chunk in self.literal_chunks):
            found = re.compile(rf"(?<![\w.-]){re.escape(chunk)}(?![\w-])").search(text, position)
            if found is None:
                return False
            position = found.end()
        return True


def _rule_words(specifier: str, body: str) -> list[str]:
    try:
        scanner = _Scanner(body, keywords=False)
        scanner.script()
    except _Unsplittable as error:
        raise RuleError(f"Bash({specifier}): {error}") from None
    if len(scanner.commands) != 1 or scanner.redirected:
        raise RuleError(
            f"Bash({specifier}) names more than one command, a substitution or a redirection: a rule matches one "
            "command and its arguments, and each part of a compound command is matched on its own; write one rule "
            "per command"
        )
    return [word.raw for word in scanner.commands[0].words]


def _pieces(raw_word: str) -> list[str | None]:
    """A rule's word as literal text and wildcards (None): a `*` outside quotes and not after a backslash."""
    pieces: list[str | None] = []
    literal, quote, index = "", "", 0
    while index < len(raw_word):
        char = raw_word[index]
        if char == "\\" and quote != "'" and index + 1 < len(raw_word):
            literal += raw_word[index : index + 2]
            index += 2
            continue
        if char in "'\"" and (not quote or quote == char):
            quote = "" if quote else char
        if char == "*" and not quote:
            pieces += [literal, None] if literal else [None]
            literal = ""
        else:
            literal += char
        index += 1
    return pieces + [literal] if literal else pieces


def _one_trailing_wildcard(pieces: list[list[str | None]]) -> bool:
    """`ls *`: one wildcard, alone as the last word; the command alone (`ls`) matches too, as in Claude Code."""
    return len(pieces) > 1 and pieces[-1] == [None] and sum(p is None for word in pieces for p in word) == 1


def _command_regex(pieces: list[list[str | None]], optional_rest: bool) -> str:
    words = pieces[:-1] if optional_rest and pieces[-1] == [None] else pieces
    body = " ".join("".join(".*" if piece is None else re.escape(piece) for piece in word) for word in words)
    return body + "(?: .*)?" if optional_rest else body


def _needle(pieces: list[list[str | None]], optional_rest: bool) -> str:
    """The longest literal text of `_command_regex`, which every text it matches holds."""
    words = pieces[:-1] if optional_rest and pieces[-1] == [None] else pieces
    runs, run = [], ""
    for index, word in enumerate(words):
        run += " " if index else ""
        for piece in word:
            if piece is None:
                runs.append(run)
                run = ""
            else:
                run += piece
    return max([*runs, run], key=len)


def _unquoted(raw_word: str) -> str:
    return re.sub(r"['\"\\]", "", raw_word)


# --- Bash: the command ---------------------------------------------------------------------------------------


class _Unsplittable(Exception):
    """Shell syntax this module does not take apart; str() names it."""


@dataclass
class _Word:
    raw: str  # as written, quotes and all
    value: str  # quotes removed and escapes resolved; expansions stay as written
    dynamic: bool = False  # the shell computes it: $, `, globs or braces outside single quotes


@dataclass
class _Command:
    words: list[_Word] = field(default_factory=list)
    writes_file: bool = False  # output redirected into a file (not /dev/null, not another descriptor)

    # What the Bash matchers read, worked out once for every rule a `Call` meets (the scanner is done by then).
    @_CachedProperty
    def text(self) -> str:
        return _text(self.words)

    @_CachedProperty
    def unwrapped(self) -> str | None:
        """The command an allow rule is matched against, wrappers stripped; None when only an exact rule may
        approve it (`_unwrapped`)."""
        view = _unwrapped(self.words)
        return None if view is None else _text(view)

    @_CachedProperty
    def views(self) -> tuple[tuple[str, list[int]], ...]:
        """The command as written and with its quotes removed (`"rm" -rf /` is `rm -rf /`; an argument stays one),
        each with where its words begin: what a deny or ask rule is matched against, from any word on. One view
        when the two are the same."""
        as_written = [word.raw for word in self.words]
        if _SHELL_SAFE.fullmatch(self.text):  # each word is its value, as shlex.quote writes it: one view
            return ((self.text, _word_starts(as_written)),)
        unquoted = [shlex.quote(word.value) for word in self.words]
        return tuple((" ".join(words), _word_starts(words)) for words in (as_written, unquoted))


_SHELL_SAFE = re.compile(r"[\w@%+=:,./ -]*", re.ASCII)  # what shlex.quote leaves as it is, and blanks
_BLANKS = " \t"
_METACHARACTERS = " \t\n;&|()<>"
_SEPARATORS = ("&&", "||", "|&", ";", "|", "&", "\n")
_REDIRECTIONS = ("<<<", "<<-", "<<", "<>", "<&", "<", ">>", ">|", ">&", ">", "&>>", "&>")
_WRITING = {">", ">>", ">|", "&>", "&>>", "<>"}
_HARMLESS_TARGETS = {"/dev/null", "/dev/stdout", "/dev/stderr"}
_SKIPPED_KEYWORDS = {"if", "then", "elif", "else", "fi", "while", "until", "do", "done", "!", "{", "}"}
_UNSUPPORTED_KEYWORDS = {"for", "select", "case", "esac", "function", "coproc", "[[", "]]", "in"}
_MAX_DEPTH = 16


class _Scanner:
    """Shell text into simple commands, nested ones (substitutions) included, in one pass and never run."""

    def __init__(self, text: str, keywords: bool = True, depth: int = 0) -> None:
        self.text, self.position, self.keywords, self.depth = text, 0, keywords, depth
        self.commands: list[_Command] = []
        self.redirected = False

    def script(self, closer: str = "") -> None:
        """Commands up to the end of the text, or up to `closer` (the `)` of a subshell or `$(`), consumed."""
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _Unsplittable("nesting deeper than Bridge takes apart")
        current = _Command()
        while True:
            self._skip_blanks()
            if self.position >= len(self.text):
                if closer:
                    raise _Unsplittable(f"a {closer!r} is missing")
                break
            if closer and self.text.startswith(closer, self.position):
                self.position += 1
                break
            current = self._step(current)
        self._finish(current)
        self.depth -= 1

    def _step(self, current: _Command) -> _Command:
        text, position = self.text, self.position
        char = text[position]
        if char == "#":
            end = text.find("\n", position)
            self.position = len(text) if end < 0 else end
        elif self._redirection_here():
            self._redirect(current)
        elif separator := next((s for s in _SEPARATORS if text.startswith(s, position)), None):
            if text.startswith((";;", ";&"), position):
                raise _Unsplittable("case clauses are not taken apart")
            self.position += len(separator)
            self._finish(current)
            return _Command()
        elif char == "(" and not current.words:
            self.position += 1
            self.script(")")
        elif char in "()":
            raise _Unsplittable(f"a {char!r} where a command or argument was expected")
        else:
            word = self._word()
            if word.raw.isdigit() and self._redirection_here():
                self._redirect(current)
            else:
                self._add(current, word)
        return current

    def _skip_blanks(self) -> None:
        while self.position < len(self.text):
            if self.text[self.position] in _BLANKS:
                self.position += 1
            elif self.text.startswith("\\\n", self.position):
                self.position += 2
            else:
                return

    def _redirection_here(self) -> bool:
        text, position = self.text, self.position
        if text.startswith(("<(", ">("), position):
            return False
        return text.startswith(_REDIRECTIONS, position)

    def _redirect(self, current: _Command) -> None:
        operator = next(op for op in _REDIRECTIONS if self.text.startswith(op, self.position))
        if operator in ("<<", "<<-"):
            raise _Unsplittable("heredocs are not taken apart")
        self.position += len(operator)
        self._skip_blanks()
        if self.position >= len(self.text) or self.text[self.position] in _METACHARACTERS:
            raise _Unsplittable(f"the redirection {operator!r} has no target")
        target = self._word().value
        self.redirected = True
        to_descriptor = operator in (">&", "<&") and (target.isdigit() or target == "-")
        if (operator in _WRITING or operator == ">&") and not to_descriptor and target not in _HARMLESS_TARGETS:
            current.writes_file = True

    def _finish(self, current: _Command) -> None:
        if current.words or current.writes_file:
            self.commands.append(current)

    def _add(self, current: _Command, word: _Word) -> None:
        if self.keywords and not current.words and word.raw in _SKIPPED_KEYWORDS:
            return
        if self.keywords and not current.words and word.raw in _UNSUPPORTED_KEYWORDS:
            raise _Unsplittable(f"{word.raw!r} constructs are not taken apart")
        current.words.append(word)

    def _word(self) -> _Word:
        start, value, dynamic = self.position, [], False
        while self.position < len(self.text):
            char = self.text[self.position]
            if self.text.startswith(("<(", ">("), self.position):
                self._substitution(self.position + 2)
                dynamic = True
            elif char in _METACHARACTERS:
                break
            elif char == "\\":
                value.append(self._escaped())
            elif char == "'":
                value.append(self._single_quoted())
            elif char == '"':
                dynamic |= self._double_quoted(value)
            elif char in "$`":
                self._expansion(value)
                dynamic = True
            else:
                dynamic |= char in "*?[{"
                value.append(char)
                self.position += 1
        return _Word(self.text[start : self.position], "".join(value), dynamic)

    def _escaped(self) -> str:
        if self.position + 1 >= len(self.text):
            raise _Unsplittable("a backslash ends the command")
        char = self.text[self.position + 1]
        self.position += 2
        return "" if char == "\n" else char

    def _single_quoted(self) -> str:
        end = self.text.find("'", self.position + 1)
        if end < 0:
            raise _Unsplittable("a single quote is never closed")
        quoted = self.text[self.position + 1 : end]
        self.position = end + 1
        return quoted

    def _double_quoted(self, value: list[str]) -> bool:
        """Appends the quoted text to `value`; True when it holds an expansion."""
        self.position += 1
        dynamic = False
        while self.position < len(self.text):
            char = self.text[self.position]
            if char == '"':
                self.position += 1
                return dynamic
            if char == "\\" and self.text[self.position + 1 : self.position + 2] in ('"', "\\", "$", "`", "\n"):
                value.append(self._escaped())
            elif char in "$`":
                self._expansion(value)
                dynamic = True
            else:
                value.append(char)
                self.position += 1
        raise _Unsplittable("a double quote is never closed")

    def _expansion(self, value: list[str]) -> None:
        """`$name`, `${…}`, `$(…)` or a backquoted command; what a substitution runs joins `self.commands`."""
        start, text = self.position, self.text
        if text.startswith("`", start):
            self._backquoted()
        elif text.startswith(("$((", "$[", "$'", '$"'), start):
            raise _Unsplittable(f"{text[start : start + 3]!r} expansions are not taken apart")
        elif text.startswith("$(", start):
            self._substitution(start + 2)
        elif text.startswith("${", start):
            end = text.find("}", start)
            inside = text[start + 2 : end]
            if end < 0 or any(char in inside for char in "$`'\"\\({") or re.search(r"@[A-Za-z]", inside):
                raise _Unsplittable("a ${…} expansion Bridge does not take apart")
            self.position = end + 1
        else:
            self.position += 1
        value.append(text[start : self.position])

    def _substitution(self, inside: int) -> None:
        self.position = inside
        self.script(")")

    def _backquoted(self) -> None:
        inner, index = [], self.position + 1
        while index < len(self.text) and self.text[index] != "`":
            if self.text[index] == "\\" and index + 1 < len(self.text):
                following = self.text[index + 1]
                inner.append(following if following in "$`\\" else "\\" + following)
                index += 2
            else:
                inner.append(self.text[index])
                index += 1
        if index >= len(self.text):
            raise _Unsplittable("a backquote is never closed")
        nested = _Scanner("".join(inner), depth=self.depth)
        nested.script()
        self.commands += nested.commands
        self.position = index + 1


# A command of plain words (quoted or not), blanks and separators only, read in one pass of a regular expression: the
# common case, which the scanner would read a character at a time. Anything else (an expansion, an escape, a
# redirection, a comment, a parenthesis, a case clause) is `other`, and leaves the command to the scanner.
_PLAIN_TOKEN = re.compile(
    r"""[ \t]*(?:(?P<separator>&&|\|\||\|&|;(?![;&])|\||&|\n)"""
    r"""|(?P<word>(?!#)(?:[^ \t\n;&|()<>'"\\$`]+|'[^']*'|"[^"\\$`]*")+)"""
    r"""|(?P<other>.)|\Z)""",
    re.DOTALL,
)
_PLAIN_PIECE = re.compile(r"([^'\"]+)|'([^']*)'|\"([^\"]*)\"")
_GLOB_CHARS = re.compile(r"[*?[{]")


def _plain_commands(command: str) -> list[_Command] | None:
    """The simple commands of a command of plain words and separators, as `_Scanner` reads them; None for any other
    command, or one the scanner refuses (tests/unit/test_permission_rules.py holds the two to the same reading)."""
    commands, current = [], _Command()
    for separator, raw, other in _PLAIN_TOKEN.findall(command):  # no group of a token is empty when it matched
        if raw:
            if not current.words and raw in _SKIPPED_KEYWORDS:
                continue
            if not current.words and raw in _UNSUPPORTED_KEYWORDS:
                return None
            current.words.append(_plain_word(raw))
        elif separator and current.words:
            commands.append(current)
            current = _Command()
        elif other:
            return None
    if current.words:
        commands.append(current)
    return commands


def _plain_word(raw: str) -> _Word:
    """A word of `_plain_commands`: quotes removed; the shell computes it when a glob character is outside quotes."""
    if "'" not in raw and '"' not in raw:
        return _Word(raw, raw, _GLOB_CHARS.search(raw) is not None)
    value, dynamic = [], False
    for piece in _PLAIN_PIECE.finditer(raw):
        unquoted = piece[1]
        if unquoted is not None:
            dynamic = dynamic or _GLOB_CHARS.search(unquoted) is not None
        value.append(piece[piece.lastindex or 0])
    return _Word(raw, "".join(value), dynamic)


def _split(command: str, depth: int = 0) -> list[_Command] | None:
    """Every simple command `command` runs (those of `sh -c '…'` and `eval` too), or None when it cannot be split."""
    try:
        return _expanded(command, depth)
    except _Unsplittable:
        return None


def _expanded(command: str, depth: int) -> list[_Command]:
    if depth > _MAX_DEPTH:
        raise _Unsplittable("nesting deeper than Bridge takes apart")
    commands = _plain_commands(command) if depth < _MAX_DEPTH else None  # the scanner refuses any script deeper
    if commands is None:
        scanner = _Scanner(command, depth=depth)
        scanner.script()
        commands = scanner.commands
    parts = []
    for part in commands:
        parts.append(part)
        inner = _inner_script([word.value for word in part.words])
        if inner is not None:
            parts += _expanded(inner, depth + 1)
    return parts


_SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "busybox"}


def _inner_script(values: list[str]) -> str | None:
    """The script a shell is handed with `-c`, or `eval`'s words, wherever they appear in a command."""
    for index, value in enumerate(values):
        name = value.rsplit("/", 1)[-1]
        if name == "eval" and index + 1 < len(values):
            return " ".join(values[index + 1 :])
        if name not in _SHELLS:
            continue
        for option_at in range(index + 1, len(values)):
            option = values[option_at]
            if not option.startswith("-") or option == "--":
                break
            if not option.startswith("--") and "c" in option[1:]:
                if option_at + 1 >= len(values):
                    raise _Unsplittable("-c without a script")
                return values[option_at + 1]
    return None


def _text(words: list[_Word]) -> str:
    return " ".join(word.raw for word in words)


def _word_starts(words: list[str]) -> list[int]:
    """Where each word begins in `" ".join(words)`."""
    starts, position = [], 0
    for word in words:
        starts.append(position)
        position += len(word) + 1
    return starts


# --- Bash: wrappers ----------------------------------------------------------------------------------------------

_EXEC_WRAPPERS = {"watch", "setsid", "ionice", "flock"}
_FIND_ACTIONS = {"-exec", "-execdir", "-ok", "-okdir", "-delete"}
_DURATION = re.compile(r"\d+(\.\d+)?[smhd]?")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


def _unwrapped(words: list[_Word]) -> list[_Word] | None:
    """The command an allow rule is matched against, documented wrappers stripped; None when only an exact rule
    may approve it (an exec wrapper, `find -exec`, a wrapper with options Bridge does not know)."""
    while words and words[0].raw in _WRAPPERS:
        stripped = _WRAPPERS[words[0].raw]([word.value for word in words])
        if stripped is None:
            return None
        words = words[len(words) - stripped :]
    if not words or words[0].dynamic or words[0].raw in _EXEC_WRAPPERS:
        return None
    if words[0].raw == "find" and any(word.value in _FIND_ACTIONS for word in words[1:]):
        return None
    return words


def _after_options(values: list[str], start: int, alone: set[str], with_value: set[str], joined: str) -> int | None:
    """The index after a wrapper's options: `alone` take nothing, `with_value` the next word; `joined` matches
    options that carry their value (`-k5`, `--signal=KILL`); None at an option outside these."""
    index = start
    while index < len(values) and values[index].startswith("-"):
        option = values[index]
        if option in alone or re.fullmatch(joined, option):
            index += 1
        elif option in with_value:
            index += 2
        else:
            return None
    return index


_TIMEOUT_FLAGS = {"--foreground", "--preserve-status", "-v", "--verbose"}


def _timeout(values: list[str]) -> int | None:
    index = _after_options(values, 1, _TIMEOUT_FLAGS, {"-k", "-s"}, r"-[ks].+|--(kill-after|signal)=.+")
    if index is None or index >= len(values) or not _DURATION.fullmatch(values[index]):
        return None
    return len(values) - index - 1


def _time(values: list[str]) -> int | None:
    index = _after_options(values, 1, {"-p"}, set(), r"(?!)")
    return None if index is None else len(values) - index


def _nice(values: list[str]) -> int | None:
    index = _after_options(values, 1, set(), {"-n"}, r"-\d+|-n-?\d+|--adjustment=-?\d+")
    return None if index is None else len(values) - index


def _nohup(values: list[str]) -> int | None:
    return None if len(values) > 1 and values[1].startswith("-") else len(values) - 1


def _stdbuf(values: list[str]) -> int | None:
    index = _after_options(values, 1, set(), {"-i", "-o", "-e"}, r"-[ioe].+|--(input|output|error)=.+")
    return None if index is None or index == 1 else len(values) - index


def _xargs(values: list[str]) -> int | None:
    return None if len(values) < 2 or values[1].startswith("-") else len(values) - 1


# Each takes the command's words and answers how many of them are the wrapped command (None: not a simple form).
_WRAPPERS = {"timeout": _timeout, "time": _time, "nice": _nice, "nohup": _nohup, "stdbuf": _stdbuf, "xargs": _xargs}


# --- Read and Edit: paths --------------------------------------------------------------------------------------


class _PathMatcher(_Matcher):
    """`Edit(src/**)`, `Read(.env)`, `Read(//etc/**)`, `Read(~/.ssh/**)`, `Edit(/docs/*.md)`, `Read(./notes.txt)`."""

    def __init__(self, tool: str, specifier: str) -> None:
        if specifier.startswith(("!", "#")):
            raise RuleError(
                f"{tool}({specifier}): a rule cannot start with {specifier[0]!r} (gitignore's negation or comment)"
            )
        if ":*" in specifier:
            raise RuleError(f"{tool}({specifier}): :* is for Bash prefixes; write a glob, such as {tool}(src/**)")
        self.tool, self.specifier = tool, specifier
        self.anchor, rest = _anchor(specifier)
        self.written_dotted = specifier.startswith("./")
        self.pinned = specifier.startswith(("/", "~/"))  # `//x`, `~/x`, `/x`: anchored where the rule says
        segments = _segments(tool, specifier, rest)
        self.contents = len(segments) > 1 and segments[-1] == "**"  # `dir/**`: everything inside dir
        named = segments[:-1] if self.contents else segments
        self.single = len(named) == 1 and named[0] != "**"
        first_glob = next((index for index, segment in enumerate(segments) if _has_glob(segment)), len(segments))
        self.reach = segments[:first_glob]  # the directories the rule stays within
        self.whole_subtree = segments == ["**"] or self.contents and first_glob == len(segments) - 1
        body = _glob_regex(tool, specifier, segments)
        self.anchored_regex = re.compile(body)
        self.any_depth_regex = re.compile(f"(?:.+/)?{body}")
        literal = len(specifier) - sum(specifier.count(char) for char in "*?[")
        self.specificity = (2 if first_glob == len(segments) else 1) * _TIERS + min(literal, _TIERS - 1)

    def matches(self, request: _Request, restrictive: bool) -> bool:
        if not _covers(self.tool, request, restrictive):
            return False
        base = request.cwd_base if self.anchor == "cwd" else _base(self.anchor, request.cwd)
        if request.kind == "search":
            return self._search_matches(request, base, restrictive)
        target = request.target
        if target is None or base is None:
            return restrictive
        relative = _below(target, base)
        if not relative:
            return False
        regex = self.any_depth_regex if self._any_depth(restrictive) else self.anchored_regex
        if regex.fullmatch(relative):
            return True
        parents = relative.split("/")[:-1]
        return restrictive and any(regex.fullmatch("/".join(parents[:k])) for k in range(1, len(parents) + 1))

    def _any_depth(self, restrictive: bool) -> bool:
        """A bare name matches at any depth (documented); `dir/**` and `./name` only for a deny or ask rule."""
        if self.pinned or not self.single:
            return False
        return restrictive or not (self.written_dotted or self.contents)

    def _search_matches(self, request: _Request, base: str | None, restrictive: bool) -> bool:
        """Grep and Glob search a directory: an allow rule must cover all of it, a deny rule any of it."""
        search = request.subject if isinstance(request.subject, dict) else {}
        root = _resolved(search.get("path") or request.cwd, request.cwd)
        glob = search.get("pattern") if request.tool == "Glob" else None
        escapes = isinstance(glob, str) and (glob.startswith(("/", "~")) or ".." in glob.split("/"))
        if root is None or base is None or escapes:
            return restrictive
        reach = posixpath.join(base, *self.reach)
        if restrictive:
            reach = base if self._any_depth(restrictive) else reach
            return _below(root, reach) is not None or _below(reach, root) is not None
        return self.whole_subtree and _below(root, reach) is not None


def _anchor(specifier: str) -> tuple[str, str]:
    if specifier.startswith("//"):
        return "root", specifier[2:]
    if specifier.startswith("~/"):
        return "home", specifier[2:]
    if specifier.startswith("/"):
        return "cwd", specifier[1:]
    return "cwd", specifier[2:] if specifier.startswith("./") else specifier


def _segments(tool: str, specifier: str, rest: str) -> list[str]:
    rest = re.sub(r"/{2,}", "/", rest)
    if rest.endswith("/"):
        rest += "**"  # gitignore: a directory, with everything in it
    segments = [segment for segment in rest.split("/") if segment not in ("", ".")]
    if not segments:
        raise RuleError(f"{tool}({specifier}) names no path after its anchor; write {tool}(//**) for every file")
    if ".." in segments:
        raise RuleError(f"{tool}({specifier}): .. is not taken in a rule; anchor it with // or ~/ instead")
    return segments


def _has_glob(segment: str) -> bool:
    return bool(re.search(r"(?<!\\)[*?[]", segment))


def _glob_regex(tool: str, specifier: str, segments: list[str]) -> str:
    """gitignore's glob as a regular expression over a path below the anchor."""
    regex = ""
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            regex += ".+" if last else "(?:.+/)?"
            continue
        regex += _segment_regex(tool, specifier, segment) + ("" if last else "/")
    try:
        re.compile(regex)
    except re.error as error:
        raise RuleError(f"{tool}({specifier}) is not a glob Bridge can read: {error}") from None
    return regex


def _segment_regex(tool: str, specifier: str, segment: str) -> str:
    regex, index = "", 0
    while index < len(segment):
        char = segment[index]
        if char == "\\":
            if index + 1 >= len(segment):
                raise RuleError(f"{tool}({specifier}): a backslash ends a path segment")
            regex += re.escape(segment[index + 1])
            index += 2
            continue
        if char == "[":
            klass, index = _character_class(tool, specifier, segment, index)
            regex += klass
            continue
        regex += "[^/]*" if char == "*" else "[^/]" if char == "?" else re.escape(char)
        index += 1
    return re.sub(r"(\[\^/\]\*)+", "[^/]*", regex)


def _character_class(tool: str, specifier: str, segment: str, start: int) -> tuple[str, int]:
    index = start + 1
    negated = index < len(segment) and segment[index] in "!^"
    index += negated
    members = ""
    first = True
    while index < len(segment) and (segment[index] != "]" or first):
        char = segment[index]
        if char == "\\" and index + 1 < len(segment):
            members += re.escape(segment[index + 1])
            index += 2
        else:
            members += "-" if char == "-" else re.escape(char)
            index += 1
        first = False
    if index >= len(segment):
        raise RuleError(f"{tool}({specifier}): a [ is never closed by ] in {segment!r}")
    return (f"[^/{members}]" if negated else f"(?!/)[{members}]"), index + 1


def _base(anchor: str, cwd: str) -> str | None:
    if anchor == "root":
        return "/"
    if anchor == "home":
        home = os.path.expanduser("~")
        return posixpath.normpath(home) if home.startswith("/") else None
    return posixpath.normpath(cwd) if isinstance(cwd, str) and cwd.startswith("/") else None


def _resolved(path: object, cwd: str) -> str | None:
    """`path` made absolute against `cwd` and `..` resolved by its text (no file system); None when not usable."""
    if not isinstance(path, str) or not path or "\x00" in path:
        return None
    if path.startswith("~"):
        if path != "~" and not path.startswith("~/"):
            return None  # another user's home
        path = os.path.expanduser("~") + path[1:]
    if not path.startswith("/"):
        if not isinstance(cwd, str) or not cwd.startswith("/"):
            return None
        path = f"{cwd}/{path}"
    normalised = posixpath.normpath(path)
    return "/" + normalised.lstrip("/") if normalised.startswith("//") else normalised


def _below(path: str, base: str) -> str | None:
    """`path` relative to `base` ('' for the base itself), or None when it lies outside."""
    if base == "/":
        return path.lstrip("/")
    if path == base:
        return ""
    return path[len(base) + 1 :] if path.startswith(base + "/") else None


# --- WebFetch: domains -----------------------------------------------------------------------------------------

_HOST = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")


class _DomainMatcher(_Matcher):
    def __init__(self, tool: str, specifier: str) -> None:
        if "://" in specifier or specifier.startswith("http"):
            raise RuleError(f"WebFetch({specifier}): name a domain, not a URL, such as WebFetch(domain:example.com)")
        if not specifier.startswith("domain:"):
            raise RuleError(f'WebFetch({specifier}): write "domain:" and a host, such as WebFetch(domain:example.com)')
        host = specifier[len("domain:") :].strip().lower().rstrip(".")
        if not host or not all(re.fullmatch(r"[a-z0-9_*-]+", label) for label in host.split(".")):
            raise RuleError(f"WebFetch({specifier}): {host!r} is not a host name (letters, digits, -, . and *)")
        self.everything = host == "*"  # every host: the same as a bare WebFetch rule
        self.specifier = None if self.everything else f"domain:{host}"
        subdomains = host.startswith("*.")
        rest = host[2:] if subdomains else host
        body = r"\.".join("[^.]*".join(re.escape(part) for part in label.split("*")) for label in rest.split("."))
        self.regex = re.compile((r"(?:[^.]+\.)+" if subdomains else "") + body)
        literal = len(host) - host.count("*")
        self.specificity = (0 if self.everything else 1 if "*" in host else 2) * _TIERS + min(literal, _TIERS - 1)

    def matches(self, request: _Request, restrictive: bool) -> bool:
        if request.kind != "fetch":
            return False
        if self.everything:
            return True
        host = request.host
        return restrictive if host is None else bool(self.regex.fullmatch(host))


def url_host(url: object) -> str | None:
    """The host of a plain http(s) URL, lower case, without a trailing dot; None for anything a browser and
    Python might read differently (backslashes, percent-encoding, non-ASCII, spaces)."""
    if not isinstance(url, str) or "\\" in url or any(char.isspace() or ord(char) < 32 for char in url):
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not host:
        return None
    host = host.rstrip(".")
    return host if _HOST.fullmatch(host) else None
