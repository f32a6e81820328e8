"""How the agent's sandbox is chosen and how it wraps a command line (jobs/processes/sandbox.py); what it hides from
a running agent is tested in tests/integration/test_sandbox.py."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.processes import sandbox

BWRAP = sandbox.Sandbox("bubblewrap", "test", bwrap="/usr/bin/bwrap", env="/usr/bin/env")


@pytest.fixture(autouse=True)
def fresh_probe():
    sandbox.find.cache_clear()
    yield
    sandbox.find.cache_clear()


def test_off_means_none_on_every_platform():
    for platform in ("linux", "darwin", "win32"):
        found = sandbox.find("off", platform)
        assert not found.available and "BRIDGE_SANDBOX=off" in found.reason


def test_windows_has_none_and_says_so():
    found = sandbox.find("auto", "win32")
    assert not found.available and "win32" in found.reason
    assert found.wrap(["claude"], path=None, hidden=[], shown=[]) == ["claude"], "auto: unconfined, as said"
    assert "agents run unconfined" in found.describe()


def test_on_without_a_sandbox_starts_no_agent():
    found = sandbox.find("on", "win32")
    with pytest.raises(PermissionError, match=r"BRIDGE_SANDBOX=on, but no sandbox can run here \(no sandbox"):
        found.wrap(["claude"], path=None, hidden=[], shown=[])
    assert "no agent will start" in found.describe()


def test_linux_without_bubblewrap_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    found = sandbox.find("auto", "linux")
    assert not found.available and "apt install bubblewrap" in found.reason


def test_a_bubblewrap_that_fails_its_probe_is_not_used(monkeypatch, tmp_path):
    refusing = "echo 'bwrap: No permissions to create new namespace' >&2; exit 1"
    for name, body in (("bwrap", refusing), ("env", 'exec /usr/bin/env "$@"')):
        program = tmp_path / name
        program.write_text(f"#!/bin/sh\n{body}\n")
        program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    found = sandbox.find("auto", "linux")
    assert not found.available
    assert "No permissions to create new namespace" in found.reason and "BRIDGE_SANDBOX=off" in found.reason


def test_without_a_sandbox_the_command_line_is_unchanged():
    none = sandbox.Sandbox("", "none here")
    assert none.wrap(["claude", "-p"], path="", hidden=[Path("/data")], shown=[]) == ["claude", "-p"]


def test_a_missing_program_raises_as_starting_it_would(tmp_path):
    with pytest.raises(FileNotFoundError):
        BWRAP.wrap(["no-such-agent"], path=str(tmp_path), hidden=[], shown=[])


def test_bubblewrap_hides_each_path_and_shows_the_roots_inside_it(tmp_path):
    agent = tmp_path / "agent"
    agent.write_text("#!/bin/sh\n")
    agent.chmod(0o755)
    data, inside, outside = Path("/srv/bridge"), Path("/srv/bridge/work"), Path("/home/me/src")
    argv = BWRAP.wrap(["agent", "--flag"], path=str(tmp_path), hidden=[data], shown=[inside, outside])
    assert argv[:2] == ["/usr/bin/env", "--ignore-signal=TERM,INT,HUP"]
    assert argv[-4:] == ["/usr/bin/env", "--default-signal=TERM,INT,HUP", str(agent), "--flag"]
    mounts = argv[argv.index("--tmpfs") : argv.index("--die-with-parent")]
    assert mounts == ["--tmpfs", str(data), "--bind", str(inside), str(inside)]


@given(st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"]), min_size=1))
def test_a_seatbelt_profile_quotes_any_path(name):
    hidden = Path("/data") / name.replace("/", "_")
    profile = sandbox.sandbox_exec_profile([hidden], [])
    deny = profile.splitlines()[2]
    quoted = deny[deny.index('(subpath "') + len('(subpath "') : -len('"))')]
    unquoted = quoted.replace('\\"', '"').replace("\\\\", "\\")
    assert unquoted == str(hidden), "the path must come back whole: a quote in it may not end the string"


def test_a_seatbelt_profile_allows_the_roots_inside_a_hidden_path_again():
    profile = sandbox.sandbox_exec_profile([Path("/data")], [Path("/data/work"), Path("/elsewhere")])
    assert profile.splitlines()[-1] == '(allow file-read* file-write* (subpath "/data/work"))'
