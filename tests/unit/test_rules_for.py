"""`permission_rules.rules_for`: the rules a remembered decision makes decide that very request again, and no
neighbour of it — generated commands and paths, against the matcher itself."""

import shlex

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from jobs.core.permission_rules import RuleError, approving, matches, rules_for

CWD = "/work/app"
word = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-/=:,@%+", min_size=1, max_size=12)
command_name = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=8).filter(
    lambda name: (
        name not in {"timeout", "time", "nice", "nohup", "stdbuf", "xargs", "eval", "sh", "bash", "exec"}
        and name
        not in {"if", "then", "elif", "else", "fi", "do", "done", "for", "in", "case", "esac", "while", "until"}
        and name not in {"select", "function", "coproc"}
    )
)
# Quoted text of any kind but the two a rule's text cannot hold (a NUL, a lone parenthesis): those are refused.
quoted = st.text(min_size=1, max_size=12).filter(lambda text: not set(text) & {"\x00", "(", ")"}).map(shlex.quote)
simple = st.builds(
    lambda name, args: " ".join([name, *args]), command_name, st.lists(st.one_of(word, quoted), max_size=4)
)
compound = st.builds(
    lambda parts, glue: glue.join(parts),
    st.lists(simple, min_size=1, max_size=4),
    st.sampled_from([" && ", "; ", " | "]),
)
segment = st.text(alphabet="abcdefgh019 ._-()[]*?!#\\", min_size=1, max_size=10).filter(lambda s: s not in (".", ".."))


def bash(command: str) -> dict:
    return {"command": command}


@given(compound)
@example("git status && npm test")
@example("ls *.py | wc -l")
def test_an_allow_remembered_for_a_command_approves_it_and_not_a_further_command(command):
    try:
        patterns = rules_for("Bash", bash(command), CWD, "allow", relative=False)
    except RuleError:
        return  # refused, with the reason: the decision is not remembered
    assert approving(patterns, "Bash", bash(command), CWD), [p.text for p in patterns]
    assert not approving(patterns, "Bash", bash(f"{command} && zzqq-other --flag"), CWD)


@given(simple)
@example("npm run build")
def test_an_exact_command_rule_does_not_approve_the_command_with_one_more_argument(command):
    patterns = rules_for("Bash", bash(command), CWD, "allow", relative=False)
    if "*" in command or "?" in command:
        return  # a glob the shell expands is kept as the rule's wildcard
    assert not approving(patterns, "Bash", bash(f"{command} extra-argument"), CWD)


@given(simple)
def test_a_deny_remembered_for_a_command_denies_it(command):
    try:
        [pattern] = rules_for("Bash", bash(command), CWD, "deny", relative=False)
    except RuleError as refused:
        assert "name the rule" in str(refused)  # e.g. a quoted ")" the rule syntax cannot hold
        return
    assert matches(pattern, "Bash", bash(command), CWD, "deny")


@given(st.lists(segment, min_size=1, max_size=4), st.booleans(), st.sampled_from(["Write", "Edit", "Read"]))
@example(["src", "a (1).py"], False, "Write")
@example(["[x]", "*.py"], True, "Read")
def test_a_path_rule_names_that_file_and_not_its_neighbour(segments, relative, tool):
    path = "/".join([CWD, *segments])
    [pattern] = rules_for(tool, {"file_path": path}, CWD, "allow", relative)
    assert pattern.tool == ("Read" if tool == "Read" else "Edit")
    assert matches(pattern, tool, {"file_path": path}, CWD, "allow")
    assert not matches(pattern, tool, {"file_path": path + "x"}, CWD, "allow")
    assert not matches(pattern, tool, {"file_path": path + "/inner"}, CWD, "allow")


@pytest.mark.parametrize(
    ("tool", "tool_input", "expected"),
    [
        ("WebFetch", {"url": "https://Docs.Python.org/3/"}, ["WebFetch(domain:docs.python.org)"]),
        ("mcp__github__list_issues", {}, ["mcp__github__list_issues"]),
        ("Grep", {"pattern": "TODO", "path": "src"}, ["Read(//work/app/src/**)"]),
        ("Agent", {"subagent_type": "Explore"}, ["Agent(Explore)"]),
        ("Approve edit: a.txt", {"tool": "write_file", "arguments": {"path": "a.txt"}}, ["Edit(//work/app/a.txt)"]),
        ("danger: rm -rf build", {"command": "rm -rf build", "description": "danger"}, ["Bash(rm -rf build)"]),
    ],
)
def test_each_kind_of_request_gets_its_narrowest_rule(tool, tool_input, expected):
    assert [p.text for p in rules_for(tool, tool_input, CWD, "allow", relative=False)] == expected


@pytest.mark.parametrize(
    ("tool_input", "reason"),
    [
        ({"command": "echo hi > notes.txt"}, "redirects its output into a file"),
        ({"command": "$CMD --help"}, "command name the shell computes"),
        ({"command": "for f in *; do rm $f; done"}, "cannot take this command apart"),
        ({"command": ""}, "names no command"),
        ({"command": "echo ')'"}, "unbalanced parentheses.*name the rule"),
    ],
)
def test_a_command_no_narrow_rule_covers_is_refused_with_the_reason(tool_input, reason):
    with pytest.raises(RuleError, match=reason):
        rules_for("Bash", tool_input, CWD, "allow", relative=False)
