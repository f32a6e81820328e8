"""Permission rules in Claude Code's syntax (jobs/core/permission_rules.py): Claude Code's documented examples as
tables, the general rules on generated commands, paths and rules, Hermes' permission requests as Bridge's ACP runner
hands them over, and the words Bridge reads in a command checked against the words bash itself passes on."""

import copy
import json
import posixpath
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from jobs.core.permission_rules import (
    ACP_KINDS,
    DECISIONS,
    Call,
    Pattern,
    RuleError,
    _CommandMatcher,
    _compiled,
    _Matcher,
    _plain_commands,
    _Scanner,
    _split,
    _Unsplittable,
    _WholeTool,
    _word_starts,
    approving,
    matches,
    parse,
    specificity,
)
from jobs.supervision.runners.base import RunSpec
from jobs.supervision.runners.hermes import HermesAcpRunner

CWD = "/work/proj"
HERMES_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hermes"


def allows(rule: str, tool: str, tool_input: dict, cwd: str = CWD) -> bool:
    return matches(parse(rule), tool, tool_input, cwd, "allow")


def denies(rule: str, tool: str, tool_input: dict, cwd: str = CWD) -> bool:
    return matches(parse(rule), tool, tool_input, cwd, "deny")


def bash(command: str) -> dict:
    return {"command": command}


# --- Bash: Claude Code's documented examples ---------------------------------------------------------------------

DOCUMENTED_BASH = [  # rule, command, matches (Claude Code's permissions page, "Bash" and "Wildcard patterns")
    ("Bash", "rm -rf /tmp/x", True),
    ("Bash(*)", "anything at all", True),
    ("Bash(npm run build)", "npm run build", True),
    ("Bash(npm run build)", "npm run build:dev", False),
    ("Bash(npm run test *)", "npm run test", True),
    ("Bash(npm run test *)", "npm run test --watch", True),
    ("Bash(npm run test:*)", "npm run test", True),
    ("Bash(npm run test:*)", "npm run test -- --coverage", True),
    ("Bash(npm run test:*)", "npm run testx", False),
    ("Bash(npm *)", "npm install", True),
    ("Bash(npm *)", "pnpm install", False),
    ("Bash(* install)", "yarn install", True),
    ("Bash(git * main)", "git checkout main", True),
    ("Bash(git * main)", "git log --oneline main", True),
    ("Bash(git * main)", "git push origin main", True),
    ("Bash(git *)", "git log --oneline --all", True),
    ("Bash(git *)", "gitk", False),
    ("Bash(ls *)", "ls -la", True),
    ("Bash(ls *)", "ls", True),
    ("Bash(ls *)", "lsof", False),
    ("Bash(ls*)", "lsof", True),
    ("Bash(ls*)", "ls -la", True),
    ("Bash(ls:*)", "ls -la", True),
    ("Bash(ls:*)", "lsof", False),
    ("Bash(* --version)", "node --version", True),
    ("Bash(git status)", "git   status", True),  # runs of blanks are one
    ("Bash(safe-cmd *)", "safe-cmd && other-cmd", False),  # "Claude Code is aware of shell operators"
    ("Bash(npm test *)", "timeout 30 npm test", True),  # process wrappers are stripped
    ("Bash(npm test *)", "nice -n 5 nohup npm test", True),
    ("Bash(grep *)", "xargs grep pattern", True),  # a bare xargs too
    ("Bash(grep *)", "xargs -n1 grep pattern", False),  # but not one with flags
    ("Bash(watch *)", "watch ls", False),  # exec wrappers: only an exact rule
    ("Bash(watch ls)", "watch ls", True),
    ("Bash(find *)", "find . -name '*.pyc' -delete", False),  # find -exec / -delete: only an exact rule
    ("Bash(find . -name '*.pyc' -delete)", "find . -name '*.pyc' -delete", True),
    ("Bash(devbox run *)", "devbox run npm test", True),  # not a wrapper: the rule is what it says
]


@pytest.mark.parametrize("rule, command, expected", DOCUMENTED_BASH)
def test_bash_rules_match_as_claude_code_documents(rule, command, expected):
    assert allows(rule, "Bash", bash(command)) is expected


def test_a_bash_rule_speaks_only_about_commands():
    assert not allows("Bash(git status)", "Read", {"file_path": f"{CWD}/git status"})
    assert not allows("Bash", "Edit", {"file_path": f"{CWD}/a.py"})
    assert not allows("Bash(git status)", "Bash", {})  # no command: nothing to allow
    assert denies("Bash(git status)", "Bash", {"command": 42})  # nor to clear of a deny rule


COMPOUNDS = [  # command, allowed by Bash(git *) with Bash(npm test), denied by Bash(rm *)
    ("git status && npm test", True, False),
    ("git status && rm -rf /", False, True),
    ("git status; rm -rf /", False, True),
    ("git status || rm -rf /", False, True),
    ("git log | rm -rf /", False, True),
    ("git log |& rm -rf /", False, True),
    ("git fetch & rm -rf /", False, True),
    ("git status\nrm -rf /", False, True),
    ("git status $(rm -rf /)", False, True),
    ("git status `rm -rf /`", False, True),
    ('git status "$(rm -rf /)"', False, True),
    ("git diff <(rm -rf /)", False, True),
    ("(git status; rm -rf /)", False, True),
    ("{ git status; rm -rf /; }", False, True),
    ("if git diff --quiet; then rm -rf /; fi", False, True),
    ("bash -c 'rm -rf /'", False, True),
    ("timeout 5 sh -ec 'rm -rf /'", False, True),
    ("eval rm -rf /", False, True),
    ("sudo rm -rf /", False, True),
    ("env X=1 rm -rf /", False, True),
    ('"rm" -rf /', False, True),
    ("git status 'rm -rf /'", True, False),  # quoted: an argument, not a command
    ('git status "&& rm -rf /"', True, False),
    ("git status \\&\\& rm -rf /", True, True),  # one command; a deny rule reads it from any word on
    ("git status # && rm -rf /", True, False),  # a comment
]


@pytest.mark.parametrize("command, allowed, denied", COMPOUNDS)
def test_a_compound_command_is_allowed_part_by_part_and_denied_by_any_part(command, allowed, denied):
    rules = [parse("Bash(git *)"), parse("Bash(npm test)")]
    assert bool(approving(rules, "Bash", bash(command), CWD)) is allowed
    assert denies("Bash(rm *)", "Bash", bash(command)) is denied


def test_the_allow_rules_that_approve_a_compound_are_one_for_each_part_most_specific_first():
    rules = [parse("Bash"), parse("Bash(git *)"), parse("Bash(npm test)"), parse("Bash(git status)")]
    assert approving(rules[1:], "Bash", bash("git status && npm test"), CWD) == [rules[3], rules[2]]
    assert approving(rules[1:], "Bash", bash("git log | npm test"), CWD) == [rules[2], rules[1]]
    assert approving(rules[1:], "Bash", bash("git status && rm -rf /"), CWD) == []
    assert approving(rules, "Bash", bash("git status && rm -rf /"), CWD) == [rules[3], rules[0]]
    assert approving(rules, "Bash", bash("cat <<EOF\nx\nEOF"), CWD) == [rules[0]]
    assert not matches(rules[1], "Bash", bash("git status && npm test"), CWD)  # one rule alone covers every part


def test_the_allow_rule_that_approves_another_tool_is_the_most_specific_one():
    rules = [parse("Read"), parse("Read(src/**)"), parse("Read(src/a.py)"), parse("Edit")]
    assert approving(rules, "Read", {"file_path": f"{CWD}/src/a.py"}, CWD) == [rules[2]]
    assert approving(rules, "Read", {"file_path": f"{CWD}/b.py"}, CWD) == [rules[0]]
    assert approving(rules[1:], "Read", {"file_path": f"{CWD}/b.py"}, CWD) == []


UNSPLITTABLE = [
    "cat <<EOF\nhello\nEOF",
    "echo 'unclosed",
    'echo "unclosed',
    "echo $((1 + 2))",
    "echo $'\\x41'",
    "for f in a b; do echo $f; done",
    "case x in x) echo y;; esac",
    "f() { echo x; }",
    "echo ${x@P}",
    "echo $(echo (",
]


@pytest.mark.parametrize("command", UNSPLITTABLE)
def test_what_bridge_cannot_split_matches_only_a_bare_bash_rule(command):
    assert allows("Bash", "Bash", bash(command))
    assert not allows("Bash(echo *)", "Bash", bash(command))
    assert not allows("Bash(cat *)", "Bash", bash(command))
    assert not allows("Bash(* *)", "Bash", bash(command))


def test_a_deny_rule_meets_what_cannot_be_split_when_its_words_appear_in_order():
    assert denies("Bash(rm -rf *)", "Bash", bash("cat <<EOF | sh\nrm -rf /\nEOF"))
    assert denies("Bash(curl *)", "Bash", bash("for u in a b; do curl $u; done"))
    assert not denies("Bash(rm -rf *)", "Bash", bash("cat <<EOF\nhello\nEOF"))
    assert not denies("Bash(curl *)", "Bash", bash("for u in a b; do echo $u; done"))


REDIRECTIONS = [  # command, allowed by Bash(echo *)
    ("echo hi > out.txt", False),
    ("echo hi >> ~/.bashrc", False),
    ("echo hi &> log", False),
    ("echo hi >& log", False),
    ("echo hi 1>out.txt", False),
    ("(echo hi) > out.txt", False),
    ("> out.txt", False),
    ("echo hi > /dev/null", True),
    ("echo hi 2>&1", True),
    ("echo hi 2>/dev/null >&2", True),
    ("echo hi < in.txt", True),
    ("echo hi <<< $(date)", False),  # what the here-string runs must be allowed too
]


@pytest.mark.parametrize("command, allowed", REDIRECTIONS)
def test_an_allow_rule_never_approves_output_redirected_into_a_file(command, allowed):
    assert allows("Bash(echo *)", "Bash", bash(command)) is allowed
    assert denies("Bash(echo *)", "Bash", bash(command)) is (command != "> out.txt")


COMPUTED_COMMANDS = [
    "$CMD -rf x",
    '"$CMD" x',
    "$(which python) x.py",
    "`which python` x.py",
    "{rm,-rf,x}",
    "r? x",
    "[ -f x ]",
]


@pytest.mark.parametrize("command", COMPUTED_COMMANDS)
def test_an_allow_rule_never_approves_a_command_whose_name_the_shell_computes(command):
    assert not allows("Bash(* x)", "Bash", bash(command))
    assert not allows("Bash(* *)", "Bash", bash(command))
    assert allows("Bash", "Bash", bash(command))


@pytest.mark.parametrize("command", [c for c in COMPUTED_COMMANDS if "$(" not in c and "`" not in c])
def test_not_even_an_exact_rule_approves_a_command_whose_name_the_shell_computes(command):
    assert not allows(f"Bash({command})", "Bash", bash(command))
    assert denies(f"Bash({command})", "Bash", bash(command))


def test_a_leading_wildcard_does_not_approve_a_command_run_with_variables_set_before_it():
    assert allows("Bash(* --version)", "Bash", bash("git --version"))
    assert not allows("Bash(* --version)", "Bash", bash("PAGER='sh -c evil' git --version"))
    assert allows("Bash(PAGER=cat git log *)", "Bash", bash("PAGER=cat git log -1"))


def test_an_exact_rule_may_name_a_wrapper_with_options_bridge_does_not_strip():
    command = "timeout --kill-after=5 --signal=TERM --foreground -v 30s npm test"
    assert allows("Bash(npm test)", "Bash", bash(command))
    assert not allows("Bash(npm test)", "Bash", bash("timeout --weird 30 npm test"))
    assert allows("Bash(timeout --weird 30 npm test)", "Bash", bash("timeout --weird 30 npm test"))


# --- Bash: general rules, on generated commands ------------------------------------------------------------------

SPECIAL_WORDS = {"if", "then", "elif", "else", "fi", "while", "until", "do", "done", "for", "select", "case", "esac"}
SPECIAL_WORDS |= {"function", "coproc", "in", "time", "timeout", "nice", "nohup", "stdbuf", "xargs", "watch"}
SPECIAL_WORDS |= {"setsid", "ionice", "flock", "find", "eval", "sh", "bash", "zsh", "dash", "ksh", "mksh", "ash"}
SPECIAL_WORDS |= {"busybox"}
WORD = st.text("abcdefgrsu0123456789-._/", min_size=1, max_size=6).filter(
    lambda word: word not in SPECIAL_WORDS and not word.startswith("-")
)
ARGUMENT = st.one_of(WORD, st.text("abc-=", min_size=1, max_size=4).map(lambda word: "-" + word))
COMMAND = st.tuples(WORD, st.lists(ARGUMENT, max_size=5)).map(lambda head: [head[0], *head[1]])
BLANKS = st.text(" \t", min_size=1, max_size=3)


@given(COMMAND, st.lists(ARGUMENT, max_size=3), st.booleans(), COMMAND, st.sampled_from([":*", " *"]))
def test_a_prefix_rule_matches_a_command_exactly_when_its_words_begin_with_the_prefix(
    prefix, rest, extend, other, suffix
):
    command = prefix + rest if extend else other
    rule = parse(f"Bash({' '.join(prefix)}{suffix})")
    expected = command[: len(prefix)] == prefix
    assert matches(rule, "Bash", bash(" ".join(command)), CWD) is expected


@given(COMMAND, COMMAND, st.data())
def test_an_exact_rule_matches_the_same_words_whatever_the_blanks_between_them(words, other, data):
    spaced = "".join(word + data.draw(BLANKS) for word in words)
    rule = parse(f"Bash({' '.join(words)})")
    assert matches(rule, "Bash", bash(spaced), CWD)
    assert matches(rule, "Bash", bash(" ".join(other)), CWD) is (other == words)


OPERATORS = st.sampled_from(["&&", "||", ";", "|", "|&", "&", "\n", " && ", " ; ", " | "])


@given(WORD, st.lists(st.tuples(st.booleans(), COMMAND), min_size=1, max_size=4), st.data())
def test_a_rule_allows_a_compound_when_it_matches_every_part_and_denies_it_when_it_meets_any(prefix, parts, data):
    commands = [[prefix, *words] if starts else words for starts, words in parts]
    text = " ".join(commands[0])
    for command in commands[1:]:
        text += data.draw(OPERATORS) + " ".join(command)
    rule = parse(f"Bash({prefix}:*)")
    assert matches(rule, "Bash", bash(text), CWD) is all(command[0] == prefix for command in commands)
    assert matches(rule, "Bash", bash(text), CWD, "deny") is any(prefix in command for command in commands)


QUOTED_OPERATOR = st.sampled_from(["&&", "||", ";", "|", "&", "\n", "$(", ")", "`", "<", ">"])


@given(QUOTED_OPERATOR, st.lists(WORD, min_size=1, max_size=3), st.sampled_from(["'", '"']))
def test_an_operator_inside_quotes_is_part_of_one_argument(operator, words, quote):
    assume(not (quote == '"' and operator in ("$(", "`")))  # those run inside double quotes
    command = f"git status {quote}{operator} {' '.join(words)}{quote}"
    assert not allows("Bash(git status)", "Bash", bash(command))
    assert allows("Bash(git status *)", "Bash", bash(command))
    assert not denies(f"Bash({words[0]} *)", "Bash", bash(command))


ANY_TEXT = st.text(st.characters(exclude_characters="\x00\n", exclude_categories=["Cs"]), max_size=6)


@settings(max_examples=60, deadline=None)
@given(st.lists(ANY_TEXT, min_size=1, max_size=4), st.sampled_from(["single", "double", "backslash"]))
def test_bridge_reads_a_command_into_the_same_words_as_bash(words, style):
    quoted = [_quote(word, style) for word in words]
    command = " ".join(["printf", "'%s\\0'", *quoted])
    passed = subprocess.run(["bash", "-c", command], capture_output=True, check=True).stdout
    parts = _split(command)
    assert parts is not None and len(parts) == 1
    assert [word.value for word in parts[0].words[2:]] == passed.decode().split("\x00")[:-1]


def _quote(word: str, style: str) -> str:
    if style == "single":
        return shlex.quote(word)
    if style == "double":
        return '"' + "".join("\\" + char if char in '"\\$`' else char for char in word) + '"'
    return "".join(char if char.isalnum() else "\\" + char for char in word) or "''"


# --- Bash: the shortcuts, against the plain reading --------------------------------------------------------------
# A command of plain words and separators is read by one regular expression (`_plain_commands`), not the scanner; and
# a Bash rule skips a part, or a whole command, that does not hold its longest literal text (`needle`). Each must give
# what the plain reading gives: the scanner, and every part matched in full.

SHELL_TOKEN = st.sampled_from(
    [
        *("git", "status", "npm", "run", "test", "ls", "-la", "rm", "-rf", "x", "a=1", "x#y", "*.py", "{a,b}", "}"),
        *("'a b'", '"a b"', "'git status'", '""', "''", "'&& x'", '"| x"', "'#'", "'a\nb'", "g'i't", '"r"m'),
        *("'*.py'", '"[x]"', "x'{a}'", '"?"*'),
        *("\\ ", "\\;", "\\&", "\\\n", "a\\'b", '"a\\"b"', '"$x"', '"`x`"', "'", '"'),
        *("&&", "||", ";", "|", "|&", "&", "\n", ";;", ";&"),
        *("$(ls)", "$(rm -rf x)", "`rm x`", "$CMD", "${x}", "<(ls)", "$((1))", "$'x'"),
        *(">", "> f", "2>&1", ">/dev/null", "< in", "<<EOF", "&> f", "#c", "# x", "(", ")"),
        *("if", "then", "fi", "for", "in", "{", "!", "[[", "case", "esac"),
        *("timeout 5", "xargs", "sh -c", "bash -c 'rm x'", "eval", "nice", "env X=1", "sudo", "find -delete"),
    ]
)
PLAIN_TOKEN = st.sampled_from(
    [
        *("git", "status", "npm", "run", "test", "ls", "-la", "rm", "-rf", "x", "a=1", "x#y", "*.py", "{a,b}", "}"),
        *("'a b'", '"a b"', '""', "''", "'&& x'", '"| x"', "'#'", "'a\nb'", "g'i't", '"r"m', "'$x'", "'a\\'"),
        *("'*.py'", '"[x]"', "x'{a}'", '"?"*'),
        *("&&", "||", ";", "|", "|&", "&", "\n", "if", "then", "fi", "{", "!", "timeout 5", "xargs", "sudo"),
    ]
)
GLUE = st.sampled_from(["", " ", "  ", "\t", " \t"])


def shell_text(tokens: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Tokens glued by blanks, or by nothing (`a'b'`, `x;;`)."""
    return st.lists(st.tuples(tokens, GLUE), min_size=1, max_size=10).map(lambda pairs: "".join(map("".join, pairs)))


def scanned(text: str) -> list | None:
    """The simple commands the scanner reads in `text`, character by character; None when it refuses the text."""
    scanner = _Scanner(text)
    try:
        scanner.script()
    except _Unsplittable:
        return None
    return scanner.commands


@settings(max_examples=400)
@given(shell_text(SHELL_TOKEN))
def test_what_the_one_pass_reader_reads_it_reads_as_the_scanner_does(text):
    read = _plain_commands(text)
    if read is not None:
        assert read == scanned(text)


@settings(max_examples=200)
@given(shell_text(PLAIN_TOKEN))
def test_a_command_of_plain_words_and_separators_is_read_in_one_pass(text):
    assert _plain_commands(text) is not None or scanned(text) is None
    assert _plain_commands(text) == scanned(text)


def test_a_command_nested_deeper_than_bridge_takes_apart_is_not_split_however_plain():
    assert _split("eval " * 15 + "ls") is not None
    assert _split("eval " * 16 + "ls") is None


def in_full(pattern: Pattern) -> _Matcher:
    """The rule's matcher without its shortcut: "" is in every text, so each part is matched in full."""
    matcher = copy.copy(_compiled(pattern.tool, pattern.specifier))
    if isinstance(matcher, _CommandMatcher):
        matcher.needle = ""
    return matcher


def approving_in_full(patterns: list[Pattern], call: Call) -> list[Pattern]:
    """`Call.approved_by` read plainly: for each part, the most specific rule that allows it, matched in full."""
    request = call.request
    ranked = sorted(patterns, key=specificity, reverse=True)
    if not request.parts:
        return next(([pattern] for pattern in ranked if in_full(pattern).matches(request, False)), [])
    chosen: list[Pattern] = []
    for part in request.parts:
        found = next((pattern for pattern in ranked if allows_in_full(pattern, call, part)), None)
        if found is None:
            return []
        if found not in chosen:
            chosen.append(found)
    return sorted(chosen, key=specificity, reverse=True)


def allows_in_full(pattern: Pattern, call: Call, part: object) -> bool:
    matcher = in_full(pattern)
    if isinstance(matcher, _CommandMatcher):
        return matcher.part_allows(part)
    return isinstance(matcher, _WholeTool) and matcher.matches(call.request, False)


WORDS = ["git", "status", "rm", "-rf", "x"]
SPELLED = st.sampled_from(WORDS).flatmap(lambda word: st.sampled_from([word, f"'{word}'", f'"{word[0]}"{word[1:]}']))
COMMAND_TOKEN = st.one_of(
    SPELLED,
    SPELLED,
    SPELLED.map(lambda word: "\\" + word),
    st.sampled_from(["&&", "||", ";", "|", "\n", "$CMD", "$(rm -rf x)", "`git status`", "> f", "2>&1", "*", "'a b'"]),
    st.sampled_from(["timeout 5", "xargs", "sh -c 'rm -rf x'", "env X=1", "&&", ";", "|", "<<EOF", "'", "#"]),
)
RULE_WORD = st.sampled_from([*WORDS, "'rm'", '"g"it', "'a b'"])
SHORTCUT_RULE = st.one_of(
    st.just("Bash"),
    st.builds("Bash({} {})".format, RULE_WORD, RULE_WORD),
    st.builds("Bash({}{})".format, RULE_WORD, st.sampled_from([":*", " *", "*", " * x", " -rf *"])),
    st.builds("Bash(* {})".format, RULE_WORD),
    st.builds("Bash({} * {})".format, RULE_WORD, RULE_WORD),
    st.builds("Bash({}*{})".format, RULE_WORD, RULE_WORD),
)


@settings(max_examples=400)
@given(st.lists(SHORTCUT_RULE, min_size=1, max_size=6, unique=True), shell_text(COMMAND_TOKEN))
@example(["Bash(git status)", "Bash(rm *)"], "git \t status;rm  -rf x")  # a part is its words, one blank apart
@example(["Bash(rm -rf *)", "Bash(git *)"], "\"r\"m -rf x && 'git' status")
def test_the_rules_decide_a_command_as_they_would_matching_every_part_in_full(rules, text):
    patterns = [parse(rule) for rule in rules]
    call = Call("Bash", bash(text), CWD)
    for pattern in patterns:
        for decision in DECISIONS:
            assert call.matched_by(pattern, decision) is in_full(pattern).matches(call.request, decision != "allow")
    assert call.approved_by(patterns) == approving_in_full(patterns, call)


@given(shell_text(SHELL_TOKEN))
def test_a_deny_rule_reads_a_part_as_written_and_with_its_quotes_removed(text):
    for part in _split(text) or []:
        written = [word.raw for word in part.words]
        unquoted = [shlex.quote(word.value) for word in part.words]
        views = {(" ".join(words), tuple(_word_starts(words))) for words in (written, unquoted)}
        assert {(view, tuple(starts)) for view, starts in part.views} == views


# --- Read and Edit: paths ----------------------------------------------------------------------------------------

DOCUMENTED_PATHS = [  # rule, tool, path, allowed, denied (Claude Code's permissions page, "Read and Edit")
    ("Read(//Users/alice/secrets/**)", "Read", "/Users/alice/secrets/key.pem", True, True),
    ("Read(//Users/alice/secrets/**)", "Read", "/Users/bob/secrets/key.pem", False, False),
    ("Read(~/Documents/*.pdf)", "Read", "/home/alice/Documents/a.pdf", True, True),
    ("Read(~/Documents/*.pdf)", "Read", "/home/alice/Documents/sub/a.pdf", False, False),
    ("Edit(/src/**/*.ts)", "Edit", f"{CWD}/src/a/b/c.ts", True, True),
    ("Edit(/src/**/*.ts)", "Edit", f"{CWD}/lib/src/c.ts", False, False),
    ("Edit(/docs/**)", "Edit", "/docs/a.md", False, False),  # a single slash is not the file system's root
    ("Edit(//tmp/scratch.txt)", "Write", "/tmp/scratch.txt", True, True),
    ("Read(*.env)", "Read", f"{CWD}/.env", True, True),
    ("Read(.env)", "Read", f"{CWD}/deep/down/.env", True, True),  # a bare name: any depth below the cwd
    ("Read(**/.env)", "Read", f"{CWD}/deep/.env", True, True),
    ("Read(.env)", "Read", "/work/.env", False, False),  # not above it
    ("Read(//**/.env)", "Read", "/elsewhere/.env", True, True),
    ("Read(src/**)", "Read", f"{CWD}/src/a/b.py", True, True),
    ("Read(src/**)", "Read", f"{CWD}/lib/src/b.py", False, True),  # deny: a directory of that name anywhere
    ("Read(/src/**)", "Read", f"{CWD}/lib/src/b.py", False, False),  # but not when anchored by its slash
    ("Edit(src/*)", "Edit", f"{CWD}/src/a.py", True, True),
    ("Edit(src/*)", "Edit", f"{CWD}/src/a/b.py", False, True),  # allow: * stays in its segment
    ("Edit(src/)", "Edit", f"{CWD}/src/a/b.py", True, True),
    ("Read(./.env)", "Read", f"{CWD}/.env", True, True),
    ("Read(./.env)", "Read", f"{CWD}/sub/.env", False, True),  # the docs differ: "the .env in the cwd" or any
    ("Edit(docs/**)", "NotebookEdit", f"{CWD}/docs/a.ipynb", True, True),  # Edit rules cover every editing tool
    ("Edit(docs/**)", "MultiEdit", f"{CWD}/docs/a.md", True, True),
    ("Read(.env)", "Edit", f"{CWD}/.env", False, True),  # a Read deny rule also blocks the Edit tool
    ("Read(.env)", "Write", f"{CWD}/.env", False, False),  # but not Write (documented)
    ("Edit(*.py)", "Read", f"{CWD}/a.py", False, False),
    ("Read(*.py)", "Read", f"{CWD}/a[1].py", True, True),
    ("Read(a\\*.py)", "Read", f"{CWD}/a*.py", True, True),
    ("Read(a\\*.py)", "Read", f"{CWD}/ab.py", False, False),
    ("Read([ab].py)", "Read", f"{CWD}/b.py", True, True),
    ("Read([!ab].py)", "Read", f"{CWD}/c.py", True, True),
    ("Read([!ab].py)", "Read", f"{CWD}/a.py", False, False),
]


@pytest.mark.parametrize("rule, tool, path, allowed, denied", DOCUMENTED_PATHS)
def test_path_rules_match_as_claude_code_documents(rule, tool, path, allowed, denied, monkeypatch):
    monkeypatch.setenv("HOME", "/home/alice")
    field = "notebook_path" if tool == "NotebookEdit" else "file_path"
    assert allows(rule, tool, {field: path}) is allowed
    assert denies(rule, tool, {field: path}) is denied


def test_a_relative_path_is_read_from_the_cwd_and_a_home_path_from_home(monkeypatch):
    monkeypatch.setenv("HOME", "/home/alice")
    assert allows("Edit(src/**)", "Edit", {"file_path": "src/a.py"})
    assert allows("Edit(src/**)", "Edit", {"file_path": "lib/../src/a.py"})
    assert not allows("Edit(src/**)", "Edit", {"file_path": "../proj2/src/a.py"})
    assert allows("Read(~/.zshrc)", "Read", {"file_path": "~/.zshrc"})
    assert not allows("Read(//**)", "Read", {"file_path": "~bob/.zshrc"})
    assert denies("Read(.env)", "Read", {"file_path": "~bob/.env"})  # unknown: a deny rule holds


SEARCHES = [  # rule, tool, input, allowed, denied
    ("Read(src/**)", "Grep", {"pattern": "x", "path": f"{CWD}/src/lib"}, True, True),
    ("Read(src/**)", "Grep", {"pattern": "x", "path": f"{CWD}/src"}, True, True),
    ("Read(src/**)", "Grep", {"pattern": "x"}, False, True),
    ("Read(src/**)", "Glob", {"pattern": "**/*.py", "path": f"{CWD}/src"}, True, True),
    ("Read(src/**)", "Glob", {"pattern": "../../**", "path": f"{CWD}/src"}, False, True),
    ("Read(src/*.py)", "Grep", {"pattern": "x", "path": f"{CWD}/src"}, False, True),
    ("Read(secrets/**)", "Grep", {"pattern": "x", "path": f"{CWD}/docs"}, False, True),  # docs/secrets/…
    ("Read(/secrets/**)", "Grep", {"pattern": "x", "path": f"{CWD}/docs"}, False, False),
    ("Read(.env)", "Grep", {"pattern": "x", "path": f"{CWD}/docs"}, False, True),
    ("Read(**)", "Grep", {"pattern": "x"}, True, True),
    ("Read", "Glob", {"pattern": "*"}, True, True),
]


@pytest.mark.parametrize("rule, tool, tool_input, allowed, denied", SEARCHES)
def test_a_search_is_allowed_when_the_rule_covers_all_of_it_and_denied_when_it_reaches_any(
    rule, tool, tool_input, allowed, denied
):
    assert allows(rule, tool, tool_input) is allowed
    assert denies(rule, tool, tool_input) is denied


NAME = st.text("abcxyz.", min_size=1, max_size=3).filter(lambda name: name not in (".", ".."))
SEGMENT = st.one_of(NAME, st.just(".."), st.just("."))


@given(NAME, st.lists(SEGMENT, min_size=1, max_size=6))
def test_a_directory_rule_allows_what_lies_in_that_directory_of_the_cwd_and_denies_it_at_any_depth(directory, segments):
    path = "/".join(segments)
    resolved = posixpath.normpath(f"{CWD}/{path}")
    inside = resolved.startswith(CWD + "/")
    folders = resolved[len(CWD) + 1 :].split("/")[:-1] if inside else []
    assert allows(f"Edit({directory}/**)", "Edit", {"file_path": path}) is (folders[:1] == [directory])
    assert denies(f"Edit({directory}/**)", "Edit", {"file_path": path}) is (directory in folders)


CWD_RULES = ["Read(**)", "Read(*.py)", "Read(.env)", "Read(/**)", "Read(./**)", "Read(a/**)", "Read(**/a)"]


@given(st.sampled_from(CWD_RULES), st.lists(SEGMENT, min_size=1, max_size=6), st.sampled_from(DECISIONS))
def test_a_path_outside_the_cwd_never_meets_a_rule_anchored_in_it(rule, segments, decision):
    path = "/".join(segments)
    assume(not posixpath.normpath(f"{CWD}/{path}").startswith(CWD + "/"))
    assert not matches(parse(rule), "Read", {"file_path": path}, CWD, decision)


# --- WebFetch, MCP, Agent, other tools ---------------------------------------------------------------------------

FETCHES = [  # rule, url, allowed, denied (Claude Code's permissions page, "WebFetch")
    ("WebFetch(domain:example.com)", "https://example.com/page", True, True),
    ("WebFetch(domain:example.com)", "http://EXAMPLE.com./page", True, True),
    ("WebFetch(domain:example.com.)", "https://example.com:8443/", True, True),
    ("WebFetch(domain:example.com)", "https://api.example.com/", False, False),
    ("WebFetch(domain:*.example.com)", "https://api.example.com/", True, True),
    ("WebFetch(domain:*.example.com)", "https://a.b.example.com/", True, True),
    ("WebFetch(domain:*.example.com)", "https://example.com/", False, False),
    ("WebFetch(domain:example.*)", "https://example.org/", True, True),
    ("WebFetch(domain:example.*)", "https://example.evil.com/", False, False),
    ("WebFetch(domain:*)", "https://anything.test/", True, True),
    ("WebFetch(domain:example.com)", "https://example.com@evil.com/", False, False),
    ("WebFetch(domain:example.com)", "https://evil.com\\@example.com/", False, True),  # browsers read evil.com
    ("WebFetch(domain:example.com)", "https://%65xample.com/", False, True),
    ("WebFetch(domain:example.com)", "ftp://example.com/", False, True),
    ("WebFetch(domain:example.com)", "not a url", False, True),
    ("WebFetch", "not a url", True, True),
]


@pytest.mark.parametrize("rule, url, allowed, denied", FETCHES)
def test_webfetch_rules_match_the_host_as_claude_code_documents(rule, url, allowed, denied):
    assert allows(rule, "WebFetch", {"url": url, "prompt": "p"}) is allowed
    assert denies(rule, "WebFetch", {"url": url, "prompt": "p"}) is denied


MCP = [  # rule, tool name, matches (Claude Code's permissions page, "MCP" and "Tool name wildcards")
    ("mcp__puppeteer", "mcp__puppeteer__puppeteer_navigate", True),
    ("mcp__puppeteer__*", "mcp__puppeteer__puppeteer_navigate", True),
    ("mcp__puppeteer__puppeteer_navigate", "mcp__puppeteer__puppeteer_navigate", True),
    ("mcp__puppeteer__puppeteer_navigate", "mcp__puppeteer__puppeteer_click", False),
    ("mcp__puppeteer", "mcp__puppeteer2__navigate", False),
    ("mcp__github__get_*", "mcp__github__get_issue", True),
    ("mcp__github__get_*", "mcp__github__create_issue", False),
    ("mcp__github", "github", False),
    ("Agent(Explore)", "Agent", True),
    ("Agent(Plan)", "Agent", False),
    ("Task(Explore)", "Task", True),
    ("WebSearch", "WebSearch", True),
    ("WebSearch", "WebFetch", False),
    ("Write", "Write", True),
    ("Write", "Edit", False),
    ("Edit", "Write", True),  # Edit rules cover every editing tool
    ("Read", "Grep", True),
    ("TodoWrite", "TodoWrite", True),
]


@pytest.mark.parametrize("rule, tool, expected", MCP)
def test_mcp_agent_and_other_tools_match_by_name(rule, tool, expected):
    assert allows(rule, tool, {"subagent_type": "Explore", "file_path": f"{CWD}/a", "pattern": "x"}) is expected


# --- Hermes over ACP ---------------------------------------------------------------------------------------------


def hermes_asks(*messages: dict) -> list:
    runner = HermesAcpRunner(RunSpec(agent="hermes", prompt="p", cwd=CWD))
    return [ask for message in messages for ask in runner.on_line(json.dumps(message).encode() + b"\n").asks]


def recorded_edit_request() -> dict:
    lines = (HERMES_FIXTURES / "acp_perm_allow.jsonl").read_text().splitlines()
    return next(e["msg"] for e in map(json.loads, lines) if e["msg"].get("method") == "session/request_permission")


def command_request(command: str, description: str) -> dict:
    """What Hermes 0.19's acp_adapter/permissions.py `_build_permission_tool_call` sends for a dangerous command."""
    tool_call = {
        "toolCallId": "perm-check-1",
        "title": f"{description}: {command}" if description else command,
        "kind": "execute",
        "status": "pending",
        "content": [{"type": "content", "content": {"type": "text", "text": f"{description}\n$ {command}"}}],
        "rawInput": {"command": command, "description": description},
    }
    params = {"sessionId": "s", "toolCall": tool_call, "options": []}
    return {"jsonrpc": "2.0", "id": 7, "method": "session/request_permission", "params": params}


HERMES_EDIT = [("Edit(a.txt)", True), ("Edit(*.txt)", True), ("Edit(b.txt)", False), ("Edit", True)]
HERMES_EDIT += [("edit", True), ("execute", False), ("Bash", False), ("Read(a.txt)", False)]


@pytest.mark.parametrize("rule, expected", HERMES_EDIT)
def test_a_hermes_edit_request_is_matched_by_edit_rules_on_its_path(rule, expected):
    (ask,) = hermes_asks(recorded_edit_request())
    assert ask.tool_name == "Approve edit: a.txt"
    assert matches(parse(rule), ask.tool_name, ask.tool_input, CWD) is expected


HERMES_COMMAND = [("Bash(rm -rf build)", True), ("Bash(rm *)", True), ("Bash(git *)", False), ("Bash", True)]
HERMES_COMMAND += [("execute", True), ("edit", False), ("Edit(**)", False)]


@pytest.mark.parametrize("description", ["recursive delete", ""])
@pytest.mark.parametrize("rule, expected", HERMES_COMMAND)
def test_a_hermes_command_request_is_matched_by_bash_rules_on_its_command(rule, expected, description):
    (ask,) = hermes_asks(command_request("rm -rf build", description))
    assert matches(parse(rule), ask.tool_name, ask.tool_input, CWD) is expected


def test_a_hermes_command_request_is_split_like_any_other_command():
    (ask,) = hermes_asks(command_request("git status && rm -rf build", "recursive delete"))
    assert not matches(parse("Bash(git *)"), ask.tool_name, ask.tool_input, CWD)
    assert matches(parse("Bash(rm *)"), ask.tool_name, ask.tool_input, CWD, "deny")


def test_a_tool_whose_input_only_looks_like_a_command_is_not_taken_for_one():
    assert not allows("Bash(ls)", "Fancy", {"command": "ls"})
    assert not allows("Bash(ls)", "Fancy: ls", {"command": "ls", "cwd": "/"})
    assert not allows("Edit(a.txt)", "Edit a.txt", {"tool": "write_file", "arguments": {"path": "a.txt"}})


# --- parsing -----------------------------------------------------------------------------------------------------

NORMALISED = [
    ("Bash(*)", Pattern("Bash", None, "Bash")),
    ("  Bash(  npm   run   test:*  )  ", Pattern("Bash", "npm run test:*", "Bash(npm run test:*)")),
    (
        "Bash(git  commit -m 'two  spaces')",
        Pattern("Bash", "git commit -m 'two  spaces'", "Bash(git commit -m 'two  spaces')"),
    ),
    ("WebFetch(domain:Example.COM.)", Pattern("WebFetch", "domain:example.com", "WebFetch(domain:example.com)")),
    ("WebFetch(domain:*)", Pattern("WebFetch", None, "WebFetch")),
    ("mcp__github__*", Pattern("mcp__github__*", None, "mcp__github__*")),
    ("execute", Pattern("execute", None, "execute")),
]


@pytest.mark.parametrize("text, pattern", NORMALISED)
def test_parse_normalises_a_rule(text, pattern):
    assert parse(text) == pattern


LOWER = st.from_regex(r"[a-z0-9-]{1,8}", fullmatch=True)
PATH_GLOB = st.lists(st.sampled_from(["src", "*.py", "**", "a?c", "[ab]x", ".env"]), min_size=1, max_size=4)
RULE = st.one_of(
    st.sampled_from(["Bash", "Read", "Edit", "Write", "WebFetch", "WebSearch", "mcp__github", "execute", "edit"]),
    st.builds("Bash({}{})".format, COMMAND.map(" ".join), st.sampled_from(["", ":*", " *", "*"])),
    st.builds(
        "{}({}{})".format,
        st.sampled_from(["Read", "Edit"]),
        st.sampled_from(["", "./", "/", "//", "~/"]),
        PATH_GLOB.map("/".join),
    ),
    st.builds(
        "WebFetch(domain:{})".format, st.from_regex(r"(\*\.)?[a-z0-9-]{1,8}(\.[a-z*]{1,4}){0,2}", fullmatch=True)
    ),
    st.builds("mcp__{}{}".format, LOWER, st.sampled_from(["", "__*", "__get_*", "__list_issues"])),
)


@given(RULE)
def test_parsing_a_rule_s_normalised_text_gives_the_same_rule(text):
    pattern = parse(text)
    assert parse(pattern.text) == pattern
    assert pattern.text == (pattern.tool if pattern.specifier is None else f"{pattern.tool}({pattern.specifier})")


TOOL = st.sampled_from(["Bash", "Read", "Edit", "WebFetch"])
SPECIFIER = st.text("abc xyz/.-", min_size=1, max_size=8).filter(str.strip)
PATH_TOOL = st.sampled_from(["Read", "Edit"])
UNKNOWN_TOOL = st.from_regex(r"[A-Z][a-z]{2,8}", fullmatch=True).filter(
    lambda name: name not in ("Read", "Edit", "Write", "Glob", "Task", "Agent")
)
MALFORMED_CASES = [  # the problem the message names, and rules that have it
    ("closed", st.builds("{}({}".format, TOOL, SPECIFIER)),
    ("closed", st.builds("{}({}){}".format, TOOL, SPECIFIER, st.sampled_from(["x", " x", "("]))),
    ("empty parentheses", st.builds("{}({})".format, TOOL, st.text(" \t", max_size=2))),
    ("names no tool", st.builds("({})".format, SPECIFIER)),
    ('no "("', st.builds("Bash{})".format, SPECIFIER)),
    ("unbalanced", st.builds("{}(a({})".format, TOOL, SPECIFIER)),
    ("capital letter", st.from_regex(r"[a-z]{3,9}", fullmatch=True).filter(lambda name: name not in ACP_KINDS)),
    ("only for Bash", st.builds("{}(x)".format, UNKNOWN_TOOL)),
    ("takes no pattern", st.builds("{}(x)".format, st.sampled_from(sorted(ACP_KINDS)))),
    (
        "would never match",
        st.builds("{}(src/**)".format, st.sampled_from(["Write", "NotebookEdit", "MultiEdit", "Glob"])),
    ),
    (
        "more than one command",
        st.builds("Bash({}{}{})".format, WORD, st.sampled_from([" && ", ";", " | ", " > f"]), WORD),
    ),
    ("more than one command", st.builds("Bash({} $({}))".format, WORD, WORD)),
    ("only at the end", st.builds("Bash({}:* x)".format, WORD)),
    ("mixes * with the :* suffix", st.builds("Bash({} * :*)".format, WORD)),
    ("never closed", st.builds("Bash('{})".format, WORD)),
    ("never closed by ]", st.builds("{}({}/[x)".format, PATH_TOOL, NAME)),
    (".. is not taken", st.builds("{}({}/../x)".format, PATH_TOOL, NAME)),
    ("not a URL", st.builds("WebFetch({})".format, st.sampled_from(["https://x.org", "http://a", "x://b"]))),
    ('"domain:"', st.builds("WebFetch({}.com)".format, st.from_regex(r"[a-z]{1,8}", fullmatch=True))),
    ("no pattern in parentheses", st.builds("mcp__{}(x)".format, LOWER)),
    ("only after mcp__<server>__", st.builds("mcp__*{}".format, LOWER)),
]
MALFORMED = st.one_of([rules.map(lambda rule, problem=problem: (rule, problem)) for problem, rules in MALFORMED_CASES])


@given(MALFORMED)
def test_a_malformed_rule_is_refused_saying_what_is_wrong(case):
    text, problem = case
    with pytest.raises(RuleError) as refused:
        parse(text)
    assert problem in str(refused.value)


@given(COMMAND, st.sampled_from(["Read", "Edit"]), NAME)
def test_a_whole_tool_is_less_specific_than_a_pattern_and_a_pattern_than_an_exact_rule(words, tool, name):
    text = " ".join(words)
    bare, prefix, exact = (specificity(parse(rule)) for rule in ("Bash", f"Bash({text}:*)", f"Bash({text})"))
    assert bare < prefix < exact
    assert specificity(parse(tool)) < specificity(parse(f"{tool}({name}/**)")) < specificity(parse(f"{tool}({name})"))
    assert specificity(parse("mcp__gh")) < specificity(parse("mcp__gh__*")) < specificity(parse(f"mcp__gh__{name}x"))
    assert (
        specificity(parse("WebFetch"))
        < specificity(parse("WebFetch(domain:*.a.org)"))
        < specificity(parse("WebFetch(domain:a.org)"))
    )


# --- allow and deny: the same rule ------------------------------------------------------------------------------

PIECE = st.one_of(WORD, st.sampled_from(["'a b'", '"$(x y)"', "`x`", "$V", "> f", "2>&1", "<<EOF", "(", ")", "*"]))
SHELL = st.lists(st.one_of(PIECE, OPERATORS), min_size=1, max_size=8).map(" ".join)
BASH_RULE = st.one_of(
    st.builds(lambda words, tail: f"Bash({' '.join(words)}{tail})", COMMAND, st.sampled_from(["", ":*", " *"])),
    st.builds(lambda word: f"Bash(* {word})", WORD),
)


@given(BASH_RULE, SHELL)
def test_a_deny_rule_meets_every_command_the_same_allow_rule_would_approve(rule, command):
    pattern = parse(rule)
    if matches(pattern, "Bash", bash(command), CWD, "allow"):
        assert matches(pattern, "Bash", bash(command), CWD, "deny")
        assert matches(pattern, "Bash", bash(command), CWD, "ask")


@given(
    st.sampled_from(CWD_RULES + ["Edit(a/*)", "Read(./a)", "Read(//**/a)"]), st.lists(SEGMENT, min_size=1, max_size=6)
)
def test_a_deny_rule_meets_every_path_the_same_allow_rule_would_approve(rule, segments):
    pattern, tool_input = parse(rule), {"file_path": "/".join(segments)}
    tool = "Edit" if rule.startswith("Edit") else "Read"
    if matches(pattern, tool, tool_input, CWD, "allow"):
        assert matches(pattern, tool, tool_input, CWD, "deny")


def test_a_decision_bridge_does_not_know_is_refused():
    with pytest.raises(ValueError, match="decision must be one of allow, ask, deny"):
        matches(parse("Bash"), "Bash", bash("ls"), CWD, "maybe")  # type: ignore[arg-type]
