"""`manage.py register_claude` on temporary homes: Linux, macOS and Windows layouts, merging, refusing, --print.
The printed `claude mcp add` line, run by the real Claude Code CLI, is in tests/e2e/test_register_claude_real.py."""

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest
from django.conf import settings
from django.core.management import CommandError
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.agents import executors
from jobs.integrations import tool_configs
from tests.support import MANAGE_PY, TOKEN, register

STATUSLINE_PY = str(Path(settings.BASE_DIR) / "jobs" / "statusline.py")
BRIDGE_STATUS_LINE = {
    "type": "command",
    "command": shlex.join([sys.executable, "-S", "-I", STATUSLINE_PY, "--url", "http://127.0.0.1:8800"]),
    "padding": 0,
}
OTHER_STATUS_LINE = {"type": "command", "command": "~/.claude/statusline.sh", "padding": 2}

# Each test's own data dir (tests/conftest.py): the address a running Bridge recorded in the real one must not leak in.
pytestmark = pytest.mark.usefixtures("data_dir")


def linux_config(home: Path) -> Path:
    directory = home / ".config" / "Claude"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / tool_configs.CLAUDE_DESKTOP_CONFIG


def claude_code_settings(home: Path) -> Path:
    """Claude Code's settings file, in a home where Claude Code has run (its directory exists)."""
    directory = home / ".claude"
    directory.mkdir(exist_ok=True)
    return directory / "settings.json"


def backups_of(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".bak-*"))


def test_fresh_config_is_created_where_claude_desktop_has_its_directory(home, environ):
    config = linux_config(home)

    output = register(home, environ, "linux")

    written = json.loads(config.read_text())
    bridge = written["mcpServers"]["bridge"]
    assert bridge["command"] == sys.executable
    assert bridge["args"] == [MANAGE_PY, "mcp"]
    assert bridge["env"]["BRIDGE_DATA_DIR"] == str(settings.DATA_DIR)
    assert bridge["env"]["DJANGO_SETTINGS_MODULE"] == "bridge.settings"
    assert bridge["env"]["BRIDGE_ALLOWED_ROOTS"]
    assert f"{config}: created" in output
    assert backups_of(config) == []


def test_other_servers_and_keys_are_kept_and_the_old_file_is_backed_up(home, environ):
    config = linux_config(home)
    original = json.dumps({"mcpServers": {"files": {"command": "npx", "args": ["-y", "fs"]}}, "theme": "dark"})
    config.write_text(original)

    register(home, environ, "linux")

    written = json.loads(config.read_text())
    assert written["theme"] == "dark"
    assert written["mcpServers"]["files"] == {"command": "npx", "args": ["-y", "fs"]}
    assert set(written["mcpServers"]) == {"files", "bridge"}
    [backup] = backups_of(config)
    assert backup.read_text() == original


def test_an_existing_bridge_entry_is_updated_not_duplicated(home, environ):
    config = linux_config(home)
    config.write_text(json.dumps({"mcpServers": {"bridge": {"command": "/old/python", "args": ["old.py", "mcp"]}}}))

    register(home, environ, "linux")
    output = register(home, environ, "linux")

    text = config.read_text()
    assert text.count('"bridge"') == 1
    assert json.loads(text)["mcpServers"]["bridge"]["command"] == sys.executable
    assert "up to date" in output
    assert len(backups_of(config)) == 1, "an unchanged config is neither rewritten nor backed up again"


@pytest.mark.parametrize(
    "content, reason",
    [
        ('{"mcpServers": {', "not valid JSON"),
        ("[1, 2]", "top level is not a JSON object"),
        ('{"mcpServers": ["bridge"]}', "'mcpServers' is not a JSON object"),
    ],
)
def test_a_config_that_is_not_a_json_object_is_refused_and_left_untouched(home, environ, content, reason):
    config = linux_config(home)
    config.write_text(content)

    with pytest.raises(CommandError) as refused:
        register(home, environ, "linux")

    assert str(config) in str(refused.value)
    assert reason in str(refused.value)
    assert config.read_text() == content
    assert backups_of(config) == []


def test_one_bad_config_stops_every_write(home, environ, tmp_path):
    environ |= {"APPDATA": str(tmp_path / "Roaming"), "LOCALAPPDATA": str(tmp_path / "Local")}
    good_dir = tmp_path / "Roaming" / "Claude"
    bad_dir = tmp_path / "Local" / "Packages" / "Claude_pzs8sxrjxfjjc" / "LocalCache" / "Roaming" / "Claude"
    good_dir.mkdir(parents=True)
    bad_dir.mkdir(parents=True)
    (bad_dir / tool_configs.CLAUDE_DESKTOP_CONFIG).write_text("not json")

    with pytest.raises(CommandError, match="nothing was written"):
        register(home, environ, "win32")

    assert not (good_dir / tool_configs.CLAUDE_DESKTOP_CONFIG).exists()


def test_print_shows_the_change_and_writes_nothing(home, environ, tmp_path):
    config = linux_config(home)
    original = '{"mcpServers": {}}'
    config.write_text(original)
    before = sorted(p.name for p in config.parent.iterdir())

    output = register(home, environ, "linux", "--print")

    assert config.read_text() == original
    assert sorted(p.name for p in config.parent.iterdir()) == before
    assert "nothing written" in output
    assert '+    "bridge": {' in output
    assert f'+      "command": {json.dumps(sys.executable)},' in output


def test_print_does_not_create_a_missing_config(home, environ):
    config = linux_config(home)

    register(home, environ, "linux", "--print")

    assert not config.exists()


def test_windows_classic_and_every_microsoft_store_install(home, tmp_path, environ):
    roaming, local = tmp_path / "AppData" / "Roaming", tmp_path / "AppData" / "Local"
    environ |= {"APPDATA": str(roaming), "LOCALAPPDATA": str(local)}
    classic = roaming / "Claude"
    stores = [
        local / "Packages" / name / "LocalCache" / "Roaming" / "Claude" for name in ("Claude_abc123", "Claude_def456")
    ]
    unrelated = local / "Packages" / "NotClaude_x" / "LocalCache" / "Roaming" / "Claude"
    for directory in [classic, *stores, unrelated]:
        directory.mkdir(parents=True)

    register(home, environ, "win32")

    for directory in [classic, *stores]:
        config = json.loads((directory / tool_configs.CLAUDE_DESKTOP_CONFIG).read_text())
        assert config["mcpServers"]["bridge"]["args"] == [MANAGE_PY, "mcp"]
    assert not (unrelated / tool_configs.CLAUDE_DESKTOP_CONFIG).exists()


def test_windows_falls_back_to_the_home_layout_without_appdata(home, environ):
    classic = home / "AppData" / "Roaming" / "Claude"
    classic.mkdir(parents=True)

    register(home, environ, "win32")

    assert (classic / tool_configs.CLAUDE_DESKTOP_CONFIG).exists()


def test_macos_layout(home, environ):
    mac = home / "Library" / "Application Support" / "Claude"
    mac.mkdir(parents=True)
    linux = linux_config(home).parent

    register(home, environ, "darwin")

    assert "bridge" in json.loads((mac / tool_configs.CLAUDE_DESKTOP_CONFIG).read_text())["mcpServers"]
    assert not (linux / tool_configs.CLAUDE_DESKTOP_CONFIG).exists(), "only the platform's own place is used"


def test_nothing_found_says_where_it_looked_and_what_to_do(home, environ):
    output = register(home, environ, "darwin")

    assert str(home / "Library" / "Application Support" / "Claude" / tool_configs.CLAUDE_DESKTOP_CONFIG) in output
    assert "Install Claude Desktop" in output
    assert '"mcpServers"' in output
    assert not (home / "Library").exists()


def test_no_secret_is_written_but_the_settings_the_mcp_process_needs_are(home, environ):
    config = linux_config(home)
    environ |= {
        "BRIDGE_CLAUDE_BIN": "/opt/claude/bin/claude",
        "BRIDGE_MAX_CONCURRENT": "2",
        "BRIDGE_WEBHOOK_SECRET": "hush",
        "DATABASE_URL": "postgres://bridge@db.internal/bridge",
    }

    output = register(home, environ, "linux")

    env = json.loads(config.read_text())["mcpServers"]["bridge"]["env"]
    assert env["BRIDGE_CLAUDE_BIN"] == "/opt/claude/bin/claude"
    assert env["BRIDGE_MAX_CONCURRENT"] == "2"
    assert env["DATABASE_URL"] == "postgres://bridge@db.internal/bridge"
    assert "BRIDGE_TOKEN" not in env and "BRIDGE_WEBHOOK_SECRET" not in env and "DJANGO_SECRET_KEY" not in env
    for secret in (TOKEN, "hush", "not-for-others"):
        assert secret not in config.read_text()
        assert secret not in output


def test_a_password_in_database_url_is_pointed_out(home, environ):
    linux_config(home)
    environ["DATABASE_URL"] = "postgres://bridge:s3cret@db/bridge"

    output = register(home, environ, "linux")

    assert "DATABASE_URL contains a password" in output


def test_agent_executables_on_path_are_written_as_absolute_paths(home, environ, tmp_path):
    config = linux_config(home)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text("#!/bin/sh\n")
    claude.chmod(0o755)
    environ["PATH"] = str(bin_dir)

    register(home, environ, "linux")

    env = json.loads(config.read_text())["mcpServers"]["bridge"]["env"]
    assert env["BRIDGE_CLAUDE_BIN"] == str(claude)
    assert "BRIDGE_HERMES_BIN" not in env


def test_prints_the_claude_code_command(home, environ):
    output = register(home, environ, "linux")

    [line] = [line for line in output.splitlines() if line.startswith("claude mcp add")]
    argv = shlex.split(line)
    assert argv[:6] == ["claude", "mcp", "add", "bridge", "--scope", "user"]
    assert argv[argv.index("--") :] == ["--", sys.executable, MANAGE_PY, "mcp"]
    assert f"BRIDGE_DATA_DIR={settings.DATA_DIR}" in argv
    assert TOKEN not in line


def test_a_failed_write_leaves_the_old_file_whole_and_no_temp_file(home, environ, monkeypatch):
    config = linux_config(home)
    original = '{"mcpServers": {"files": {"command": "npx"}}}'
    config.write_text(original)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        register(home, environ, "linux")

    assert config.read_text() == original
    assert not list(config.parent.glob("*.tmp"))


def test_a_symlinked_config_stays_a_symlink(home, environ, tmp_path):
    config = linux_config(home)
    real = tmp_path / "dotfiles" / "claude.json"
    real.parent.mkdir()
    real.write_text("{}")
    config.symlink_to(real)

    register(home, environ, "linux")

    assert config.is_symlink()
    assert "bridge" in json.loads(real.read_text())["mcpServers"]


def test_hermes_home_is_passed_on_so_the_mcp_process_finds_the_same_skills(home, environ):
    config = linux_config(home)
    environ["HERMES_HOME"] = "/srv/hermes"

    register(home, environ, "linux")

    assert json.loads(config.read_text())["mcpServers"]["bridge"]["env"]["HERMES_HOME"] == "/srv/hermes"


# --- Claude Code's status line ----------------------------------------------------------------------------


def test_the_status_line_is_added_to_claude_code_settings(home, environ):
    path = claude_code_settings(home)

    output = register(home, environ, "linux")

    assert json.loads(path.read_text()) == {"statusLine": BRIDGE_STATUS_LINE}
    assert f"{path}: created" in output


def test_settings_keep_their_other_keys_and_are_backed_up(home, environ):
    path = claude_code_settings(home)
    original = json.dumps({"model": "opus", "permissions": {"allow": ["Bash(ls:*)"]}, "env": {"A": "1"}})
    path.write_text(original)

    register(home, environ, "linux")

    written = json.loads(path.read_text())
    assert written == {**json.loads(original), "statusLine": BRIDGE_STATUS_LINE}
    assert list(written) == ["model", "permissions", "env", "statusLine"], "keys keep their order"
    [backup] = backups_of(path)
    assert backup.read_text() == original


def test_the_status_line_is_idempotent(home, environ):
    path = claude_code_settings(home)
    path.write_text('{"theme": "dark"}')

    register(home, environ, "linux")
    after_first = path.read_text()
    output = register(home, environ, "linux")

    assert path.read_text() == after_first
    assert f"{path}: up to date" in output
    assert len(backups_of(path)) == 1


def test_a_status_line_that_is_not_bridges_is_kept(home, environ):
    path = claude_code_settings(home)
    original = json.dumps({"statusLine": OTHER_STATUS_LINE, "model": "opus"})
    path.write_text(original)

    output = register(home, environ, "linux")

    assert path.read_text() == original
    assert backups_of(path) == []
    assert "kept its statusLine, which is not Bridge's" in output
    assert "~/.claude/statusline.sh" in output and "--replace-status-line" in output


def test_replace_status_line_replaces_another_programs(home, environ):
    path = claude_code_settings(home)
    path.write_text(json.dumps({"statusLine": OTHER_STATUS_LINE, "model": "opus"}))

    register(home, environ, "linux", "--replace-status-line")

    assert json.loads(path.read_text()) == {"statusLine": BRIDGE_STATUS_LINE, "model": "opus"}
    assert len(backups_of(path)) == 1


def test_bridges_status_line_from_another_checkout_is_updated(home, environ):
    path = claude_code_settings(home)
    old = {"type": "command", "command": "/old/venv/bin/python -S -I /old/bridge/jobs/statusline.py --url x"}
    path.write_text(json.dumps({"statusLine": old}))

    register(home, environ, "linux")

    assert json.loads(path.read_text())["statusLine"] == BRIDGE_STATUS_LINE


def test_print_shows_the_status_line_and_writes_nothing(home, environ):
    path = claude_code_settings(home)
    path.write_text("{}")

    output = register(home, environ, "linux", "--print")

    assert path.read_text() == "{}"
    assert backups_of(path) == []
    assert f'+    "command": {json.dumps(BRIDGE_STATUS_LINE["command"])},' in output


def test_without_claude_code_settings_directory_nothing_is_created(home, environ):
    output = register(home, environ, "linux")

    assert not (home / ".claude").exists()
    assert "No Claude Code settings directory" in output
    assert json.dumps({"statusLine": BRIDGE_STATUS_LINE}) in output


def test_no_status_line_leaves_claude_code_settings_alone(home, environ):
    path = claude_code_settings(home)

    output = register(home, environ, "linux", "--no-status-line")

    assert not path.exists()
    assert "statusLine" not in output


def test_status_line_url_and_claude_config_dir(home, environ, tmp_path):
    config_dir = tmp_path / "claude-config"
    config_dir.mkdir()
    environ["CLAUDE_CONFIG_DIR"] = str(config_dir)

    register(home, environ, "linux", "--url", "http://127.0.0.1:9911/")

    command = json.loads((config_dir / "settings.json").read_text())["statusLine"]["command"]
    assert shlex.split(command)[-2:] == ["--url", "http://127.0.0.1:9911"]
    assert not (home / ".claude").exists()


def test_a_url_the_status_line_cannot_use_is_refused(home, environ):
    with pytest.raises(CommandError, match="http://"):
        register(home, environ, "linux", "--url", "https://127.0.0.1:8800")


def test_bad_claude_code_settings_stop_every_write(home, environ):
    desktop = linux_config(home)
    path = claude_code_settings(home)
    path.write_text('{"statusLine": ')

    with pytest.raises(CommandError, match="nothing was written") as refused:
        register(home, environ, "linux")

    assert str(path) in str(refused.value)
    assert not desktop.exists()
    assert path.read_text() == '{"statusLine": '


@pytest.mark.parametrize(
    "python, script, expected",
    [
        (
            r"C:\Users\me\bridge\.venv\Scripts\python.exe",
            r"C:\Users\me\bridge\jobs\statusline.py",
            "C:/Users/me/bridge/.venv/Scripts/python.exe -S -I C:/Users/me/bridge/jobs/statusline.py "
            "--url http://127.0.0.1:8800",
        ),
        (
            r"C:\Program Files (x86)\Bridge\.venv\Scripts\python.exe",
            r"D:\My Projects\bridge\jobs\statusline.py",
            '"C:/Program Files (x86)/Bridge/.venv/Scripts/python.exe" -S -I "D:/My Projects/bridge/jobs/statusline.py" '
            "--url http://127.0.0.1:8800",
        ),
        (
            r"C:\Users\$me\py.exe",
            r"C:\b\jobs\statusline.py",
            "'C:/Users/$me/py.exe' -S -I C:/b/jobs/statusline.py --url http://127.0.0.1:8800",
        ),
    ],
    ids=["plain", "spaces", "dollar"],
)
def test_the_windows_status_line_command_survives_git_bash_and_cmd(python, script, expected):
    command = tool_configs.statusline_command("http://127.0.0.1:8800", "win32", python, script)

    assert command == expected
    assert tool_configs.is_bridge_status_line({"command": command})


def test_the_status_line_command_quotes_posix_paths():
    command = tool_configs.statusline_command("http://127.0.0.1:8800", "darwin", "/Users/me/My Bridge/.venv/bin/python")

    assert shlex.split(command)[0] == "/Users/me/My Bridge/.venv/bin/python"


# --- where Claude Desktop is, by platform and environment --------------------------------------------------


def test_windows_places_follow_appdata_and_localappdata():
    environ = {"APPDATA": r"E:\Roaming", "LOCALAPPDATA": r"F:\Local", "USERPROFILE": r"C:\Users\me"}

    places = tool_configs.claude_desktop_places(PureWindowsPath(r"C:\Users\me"), environ, "win32")

    assert [str(place) for place in places] == [
        r"E:\Roaming\Claude\claude_desktop_config.json",
        r"F:\Local\Packages\Claude_*\LocalCache\Roaming\Claude\claude_desktop_config.json",
        r"F:\Local\Claude-Data\*\claude_desktop_config.json",
    ]


def test_windows_places_without_appdata_come_from_the_profile():
    environ = {"USERPROFILE": r"C:\Users\Jo Smith"}

    places = tool_configs.claude_desktop_places(PureWindowsPath(r"C:\Users\other"), environ, "win32")

    assert [str(place) for place in places] == [
        r"C:\Users\Jo Smith\AppData\Roaming\Claude\claude_desktop_config.json",
        r"C:\Users\Jo Smith\AppData\Local\Packages\Claude_*\LocalCache\Roaming\Claude\claude_desktop_config.json",
        r"C:\Users\Jo Smith\AppData\Local\Claude-Data\*\claude_desktop_config.json",
    ]


def test_macos_and_linux_places():
    home = PurePosixPath("/Users/me")

    assert [str(p) for p in tool_configs.claude_desktop_places(home, {"HOME": "/Users/me"}, "darwin")] == [
        "/Users/me/Library/Application Support/Claude/claude_desktop_config.json"
    ]
    assert [str(p) for p in tool_configs.claude_desktop_places(home, {"XDG_CONFIG_HOME": "/xdg"}, "linux")] == [
        "/xdg/Claude/claude_desktop_config.json"
    ]


def test_windows_store_claude_data_install_is_found(home, tmp_path, environ):
    local = tmp_path / "AppData" / "Local"
    environ |= {"APPDATA": str(tmp_path / "AppData" / "Roaming"), "LOCALAPPDATA": str(local)}
    store = local / "Claude-Data" / "Claude_pzs8sxrjxfjjc"
    store.mkdir(parents=True)
    (store / tool_configs.CLAUDE_DESKTOP_CONFIG).write_text('{"mcpServers": {"files": {"command": "npx"}}}')
    (local / "Claude-Data" / "stray-file.txt").write_text("not an install")

    register(home, environ, "win32")

    config = json.loads((store / tool_configs.CLAUDE_DESKTOP_CONFIG).read_text())
    assert set(config["mcpServers"]) == {"files", "bridge"}
    assert tool_configs.claude_desktop_configs(home, environ, "win32") == [store / tool_configs.CLAUDE_DESKTOP_CONFIG]


def test_nothing_found_on_windows_lists_every_pattern(home, environ):
    environ |= {"APPDATA": str(home / "Roaming"), "LOCALAPPDATA": str(home / "Local")}

    output = register(home, environ, "win32")

    assert "Claude_*" in output and "Claude-Data" in output


# --- line endings -----------------------------------------------------------------------------------------


def test_a_crlf_config_stays_crlf(home, environ):
    config = linux_config(home)
    original = b'{\r\n  "mcpServers": {\r\n    "files": {"command": "npx"}\r\n  }\r\n}\r\n'
    config.write_bytes(original)
    settings_path = claude_code_settings(home)
    settings_path.write_bytes(b'{\r\n  "model": "opus"\r\n}\r\n')

    register(home, environ, "linux")
    output = register(home, environ, "linux")

    for path in (config, settings_path):
        written = path.read_bytes()
        assert written.count(b"\r\n") == written.count(b"\n") > 3, f"{path} lost its CRLF line endings"
        assert f"{path}: up to date" in output, "CRLF vs LF is no change"
    assert "bridge" in json.loads(config.read_bytes())["mcpServers"]
    assert backups_of(config)[0].read_bytes() == original


def test_an_lf_config_stays_lf(home, environ):
    config = linux_config(home)
    config.write_bytes(b'{\n  "mcpServers": {}\n}\n')

    register(home, environ, "linux")

    assert b"\r" not in config.read_bytes()


# --- what the supervisor that Claude Desktop starts needs (issue 13.1) --------------------------------------------

# Claude Code's credentials file after `claude` then /login (a fake token).
CLAUDE_LOGIN = json.dumps({"claudeAiOauth": {"accessToken": "sk-ant-oat01-fake", "scopes": ["user:inference"]}})
SECRET_NAMES = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_CUSTOM_HEADERS",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "BRIDGE_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
]
SETTING_NAMES = [
    "HOME",
    "PATH",
    "CLAUDE_CONFIG_DIR",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_MODEL",
    "CLAUDE_CODE_USE_BEDROCK",
]
SESSION_NAMES = ["CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SSE_PORT", "CLAUDECODE", "TERM_PROGRAM", "SSH_AUTH_SOCK"]
shell_env = st.dictionaries(
    st.sampled_from(SECRET_NAMES + SETTING_NAMES + SESSION_NAMES),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12),
)


@hypothesis_settings(max_examples=200, deadline=None)
@given(environ=shell_env)
def test_the_recorded_env_has_what_runs_claude_and_never_a_credential(environ):
    env = tool_configs.mcp_server_env(environ)

    for name in SECRET_NAMES:
        assert name not in env
    for name in SETTING_NAMES:
        assert env.get(name) == (environ.get(name) or None)
    for name in SESSION_NAMES:
        assert name not in env, "what one terminal session set is not pinned into Claude Desktop's config"


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    url=st.builds(
        "".join,
        st.lists(
            st.sampled_from(["https://", "http://[", "::1", "]", "user", ":", "pw", "@", "host", ":99999", "/x", "%"])
            | st.text(max_size=4),
            max_size=8,
        ),
    )
    | st.just("https://user:pw@host/v1")
)
def test_a_gateway_url_of_any_shape_is_recorded_with_a_warning_when_it_may_hold_a_password(url):
    """ANTHROPIC_BASE_URL is copied as it is: a malformed one does not crash register_claude, and one that holds (or,
    unparseable, may hold) user:password@ is called out, since the config is plain text."""
    warnings = tool_configs.credential_warnings({"env": {"ANTHROPIC_BASE_URL": url}})
    if "@" not in url:
        assert warnings == [], "no user:password@ part, nothing to warn of"
    elif url.startswith("https://user:pw@host/"):
        assert warnings and "ANTHROPIC_BASE_URL contains a password" in warnings[0]


def test_an_unparseable_gateway_url_with_an_at_sign_is_warned_of():
    assert tool_configs.credential_warnings({"env": {"ANTHROPIC_BASE_URL": "http://[user:pw@::1"}})
    assert not tool_configs.credential_warnings({"env": {"ANTHROPIC_BASE_URL": "http://[::1"}})


@hypothesis_settings(max_examples=120, deadline=None)
@given(
    shell=st.dictionaries(
        st.sampled_from(
            [name for name, _ in executors.CLAUDE_ENV_LOGINS] + ["CLAUDE_CONFIG_DIR", "ANTHROPIC_BASE_URL"]
        ),
        st.sampled_from(["x", "https://gateway.internal"]),
    ),
    logged_in=st.booleans(),
)
def test_the_supervisor_claude_desktop_starts_can_log_in_or_register_says_so(shell, logged_in):
    """Whatever account the shell gives Claude Code, a supervisor started with only the recorded env (as Claude
    Desktop starts `manage.py mcp`) has it too, unless it is a credential in the environment: then a warning says
    what to do instead."""
    with tempfile.TemporaryDirectory() as root:
        shell = {**shell, "HOME": root, "PATH": "/usr/bin:/bin"}
        if "CLAUDE_CONFIG_DIR" in shell:
            shell["CLAUDE_CONFIG_DIR"] = str(Path(root) / "elsewhere")
        config_dir = Path(shell.get("CLAUDE_CONFIG_DIR") or Path(root) / ".claude")
        if logged_in:
            config_dir.mkdir(parents=True)
            (config_dir / ".credentials.json").write_text(CLAUDE_LOGIN)
        entry = tool_configs.mcp_server_entry(shell)

        here, _ = executors.claude_login(shell, "linux")
        there, _ = executors.claude_login(entry["env"], "linux")
        warnings = tool_configs.executor_warnings(shell, entry, "linux")

    assert there == executors.YES or warnings
    if here == executors.YES and there != executors.YES:
        assert "/login" in warnings[0] and "make run" in warnings[0]
    if there == executors.YES:
        assert warnings == []
    recorded_account = logged_in or bool({"CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"} & set(shell))
    assert (there == executors.YES) == recorded_account


def test_register_warns_when_only_an_api_key_in_this_shell_logs_claude_in(home, environ):
    linux_config(home)
    environ |= {"HOME": str(home), "ANTHROPIC_API_KEY": "sk-ant-only-here"}

    output = register(home, environ, "linux")

    assert "sk-ant-only-here" not in output and "sk-ant-only-here" not in linux_config(home).read_text()
    assert "a supervisor that `manage.py mcp` starts" in output and "would not" in output
    assert "/login" in output and "make run" in output


def test_a_supervisor_started_with_only_the_recorded_env_finds_claude_and_its_login(home, environ, tmp_path):
    """The recorded env alone, as the complete environment of a new Bridge process (Claude Desktop adds little):
    it finds the CLI on the recorded PATH and its login under the recorded HOME."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    claude = bin_dir / "claude"
    claude.write_text('#!/bin/sh\necho "9.9.9 (Claude Code)"\n')
    claude.chmod(0o755)
    (home / ".claude").mkdir()
    (home / ".claude" / ".credentials.json").write_text(CLAUDE_LOGIN)
    environ |= {"HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}/usr/bin:/bin"}

    env = tool_configs.mcp_server_env(environ)
    check = (
        "from jobs.agents import executors; s = executors.claude_status(); print(s.ready, s.path, s.version, sep='|')"
    )
    run = subprocess.run(
        [sys.executable, MANAGE_PY, "shell", "-c", check], env=env, capture_output=True, text=True, timeout=120
    )

    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == f"yes|{claude}|9.9.9 (Claude Code)"


def test_the_status_line_url_defaults_to_where_bridge_listens(home, environ):
    claude_code_settings(home)
    tool_configs.record_server_url("http://127.0.0.1:8911")

    output = register(home, environ, "linux")

    assert "http://127.0.0.1:8911 (where the running Bridge listens" in output
    command = json.loads(claude_code_settings(home).read_text())["statusLine"]["command"]
    assert command.endswith("--url http://127.0.0.1:8911")


# --- the older MCP server Bridge replaces (issue 29) ----------------------------------------------------------------

OLD_ENTRY = {"command": "node", "args": ["/home/me/claude-hermes-bridge/dist/index.js"], "env": {"HERMES_HOME": "/h"}}
OLD_WARNING = (
    'warning: {path}: "hermes" (node /home/me/claude-hermes-bridge/dist/index.js) is the older MCP server Bridge '
    "replaces: it offers the same tools (hermes_run, hermes_status, hermes_resume, hermes_jobs, …), so Claude Desktop "
    "would show each twice and Claude could call the old one. Run this again with --replace-old to remove it (the file "
    "is backed up first), or remove it by hand."
)


def config_with_the_older_server(home: Path) -> tuple[Path, str]:
    config = linux_config(home)
    original = json.dumps({"mcpServers": {"hermes": OLD_ENTRY, "files": {"command": "npx", "args": ["fs"]}}})
    config.write_text(original)
    return config, original


def test_the_older_servers_entry_is_pointed_out_and_kept_by_default(home, environ):
    config, _ = config_with_the_older_server(home)

    output = register(home, environ, "linux")

    assert OLD_WARNING.format(path=config) in output.splitlines(), output
    servers = json.loads(config.read_text())["mcpServers"]
    assert servers["hermes"] == OLD_ENTRY and set(servers) == {"hermes", "files", "bridge"}


def test_replace_old_removes_the_older_servers_entry_with_the_one_backup(home, environ):
    config, original = config_with_the_older_server(home)

    output = register(home, environ, "linux", "--replace-old")

    [backup] = backups_of(config)
    assert backup.read_text() == original
    assert f"{config}: updated (the old file is in {backup})" in output.splitlines()
    assert (
        f'{config}: "hermes" (node /home/me/claude-hermes-bridge/dist/index.js) is the older MCP server Bridge '
        "replaces: removed it; the backup above keeps it"
    ) in output.splitlines(), output
    assert "warning:" not in output.split("To add Bridge to Claude Code")[0]
    assert set(json.loads(config.read_text())["mcpServers"]) == {"files", "bridge"}
    assert not list(config.parent.glob(".*.tmp")), "written through a temporary file that was renamed"


def test_replace_old_with_print_shows_the_removal_and_writes_nothing(home, environ):
    config, original = config_with_the_older_server(home)

    output = register(home, environ, "linux", "--replace-old", "--print")

    assert config.read_text() == original and backups_of(config) == []
    removed = [line for line in output.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in output.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any("claude-hermes-bridge" in line for line in removed), output
    assert added and not any("claude-hermes-bridge" in line for line in added), output
    assert (
        f'{config}: "hermes" (node /home/me/claude-hermes-bridge/dist/index.js) is the older MCP server Bridge '
        "replaces: would remove it (--print: nothing written)"
    ) in output.splitlines(), output


# The older server as people registered it: its folder (as cloned, or unpacked from a release or branch zip), its
# npm package (scoped or not, with a version), its Python module, on POSIX or Windows paths, quoted or not, as
# separate arguments or one command string.
OLD_FOLDER = st.sampled_from(
    ["claude-hermes-bridge", "Claude-Hermes-Bridge", "claude_hermes_bridge", "claude-hermes-bridge-main", "hermes-mcp"]
    + ["hermes_mcp", "hermes-mcp-1.4.0", "HERMES-MCP"]
)
PARENT = st.lists(st.sampled_from(["home", "me", "Users", "src", "tools", "My Tools", "opt"]), max_size=3)


@st.composite
def older_server_entries(draw) -> dict:
    folder, parent = draw(OLD_FOLDER), draw(PARENT)
    script = draw(st.sampled_from([["dist", "index.js"], ["index.js"], ["server.py"], ["src", "server.py"], []]))
    windows = draw(st.booleans())
    sep, root = ("\\", "C:\\") if windows else ("/", "/")
    path = root + sep.join([*parent, folder, *script])
    interpreter = draw(st.sampled_from(["node", "python3", "/usr/bin/node", "C:\\Python312\\python.exe", "uv"]))
    shapes = [
        {"command": interpreter, "args": [path]},
        {"command": "npx", "args": ["-y", folder + draw(st.sampled_from(["", "@latest", "@1.2.3"]))]},
        {"command": "npx", "args": ["-y", f"@someone/{folder}"]},
        {"command": "python", "args": ["-m", folder.replace("-", "_") + draw(st.sampled_from(["", ".server"]))]},
        {"command": "uvx", "args": [folder]},
        {"command": f'{interpreter} "{path}"'},  # one command string, the path quoted
        {"command": path},  # the script itself, made executable
    ]
    entry = draw(st.sampled_from(shapes))
    if draw(st.booleans()):
        entry["env"] = {"HERMES_HOME": "/h", "LOG_LEVEL": "debug"}
    return entry


# Servers that are not the older one, even when named "hermes": Hermes Agent's own MCP server, other tools, and
# Bridge itself from a checkout whose path holds the older server's names.
NOT_OLDER_EVEN_AS_HERMES = [
    {"command": "hermes", "args": ["mcp", "serve"]},
    {"command": "/home/me/.hermes/hermes-agent/venv/bin/hermes", "args": ["mcp", "serve", "--verbose"]},
    {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/src"]},
    {"command": "uvx", "args": ["mcp-server-git", "--repository", "/home/me/src/hermes"]},
    {"command": sys.executable, "args": ["/home/me/hermes-mcp/manage.py", "mcp"]},
    {"command": "C:\\bridge\\.venv\\Scripts\\python.exe", "args": ["C:\\claude-hermes-bridge\\manage.py", "mcp"]},
    {"command": "/srv/claude-hermes-bridge-checkout/.venv/bin/python", "args": ["manage.py", "mcp"]},
    {"url": "https://example.com/hermes/mcp"},
    {"command": ["not", "text"]},
]
# Under any other name, an index.js or server.py is some other server's.
OTHER_SERVERS = st.sampled_from(
    NOT_OLDER_EVEN_AS_HERMES
    + [{"command": "node", "args": ["/home/me/tools/weather/index.js"]}, {"command": "python3", "args": ["server.py"]}]
)
OTHER_NAMES = st.sampled_from(["files", "git", "weather", "notes", "old-bridge", "hermes-agent", "hermes2"])


@st.composite
def desktop_configs(draw) -> tuple[dict, set[str]]:
    """A Claude Desktop config with the older server under some names (or none) among other servers: (the config,
    the names of the older server's entries)."""
    servers, older = {}, set()
    for name in draw(st.lists(OTHER_NAMES, unique=True, max_size=4)):
        servers[name] = draw(OTHER_SERVERS)
    if draw(st.booleans()):
        name = draw(st.sampled_from(["hermes", "Hermes", "hermes-old", "claude-hermes-bridge", "h"]))
        servers[name] = draw(older_server_entries())
        older.add(name)
    if draw(st.booleans()):  # under its README's name, its entry point alone says what it is
        entry_point = draw(st.sampled_from(["/home/me/bridge/dist/index.js", "C:\\tools\\old\\server.py"]))
        servers["hermes"] = {"command": "node" if entry_point.endswith(".js") else "python", "args": [entry_point]}
        older.add("hermes")
    if draw(st.booleans()):
        servers["bridge"] = draw(st.sampled_from([OLD_ENTRY, {"command": "/old/python", "args": ["manage.py", "mcp"]}]))
    return {"mcpServers": servers, "theme": "dark"}, older


@hypothesis_settings(max_examples=300, deadline=None)
@given(config=desktop_configs())
def test_the_older_server_is_found_under_any_name_and_replace_old_removes_only_it(config):
    config, older = config
    path = Path("/nowhere/claude_desktop_config.json")
    current = json.dumps(config)
    entry = {"command": sys.executable, "args": [MANAGE_PY, "mcp"], "env": {}}

    assert set(tool_configs.older_servers(path, current)) == older
    kept = json.loads(tool_configs.merged_claude_desktop_config(path, current, entry))
    replaced = json.loads(tool_configs.merged_claude_desktop_config(path, current, entry, drop=older))

    others = {name: server for name, server in config["mcpServers"].items() if name not in older | {"bridge"}}
    assert replaced == {"mcpServers": others | {"bridge": entry}, "theme": "dark"}
    assert kept["mcpServers"] == {name: s for name, s in config["mcpServers"].items() if name != "bridge"} | {
        "bridge": entry
    }


@hypothesis_settings(max_examples=100, deadline=None)
@given(name=OTHER_NAMES, server=OTHER_SERVERS, as_hermes=st.sampled_from(NOT_OLDER_EVEN_AS_HERMES))
def test_bridges_own_entry_and_other_servers_are_never_the_older_one(name, server, as_hermes):
    assert not tool_configs.is_older_server(name, server)
    assert not tool_configs.is_older_server("hermes", as_hermes) and not tool_configs.is_older_server(
        "Hermes ", as_hermes
    )
