"""`manage.py register_claude` on temporary homes: Linux, macOS and Windows layouts, merging, refusing, --print."""

import json
import os
import shlex
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from jobs import integrations
from tests.e2e import claude_bin

MANAGE_PY = str(Path(settings.BASE_DIR) / "manage.py")
TOKEN = "brg_do_not_leak_this_token_value"


def register(home: Path, environ: dict, platform: str, *args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("register_claude", *args, home=home, environ=environ, platform=platform, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def linux_config(home: Path) -> Path:
    directory = home / ".config" / "Claude"
    directory.mkdir(parents=True, exist_ok=True)
    return directory / integrations.CLAUDE_DESKTOP_CONFIG


def backups_of(path: Path) -> list[Path]:
    return sorted(path.parent.glob(path.name + ".bak-*"))


@pytest.fixture
def home(tmp_path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def environ() -> dict:
    return {"PATH": "", "BRIDGE_TOKEN": TOKEN, "DJANGO_SECRET_KEY": "not-for-others"}


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
    (bad_dir / integrations.CLAUDE_DESKTOP_CONFIG).write_text("not json")

    with pytest.raises(CommandError, match="nothing was written"):
        register(home, environ, "win32")

    assert not (good_dir / integrations.CLAUDE_DESKTOP_CONFIG).exists()


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
        config = json.loads((directory / integrations.CLAUDE_DESKTOP_CONFIG).read_text())
        assert config["mcpServers"]["bridge"]["args"] == [MANAGE_PY, "mcp"]
    assert not (unrelated / integrations.CLAUDE_DESKTOP_CONFIG).exists()


def test_windows_falls_back_to_the_home_layout_without_appdata(home, environ):
    classic = home / "AppData" / "Roaming" / "Claude"
    classic.mkdir(parents=True)

    register(home, environ, "win32")

    assert (classic / integrations.CLAUDE_DESKTOP_CONFIG).exists()


def test_macos_layout(home, environ):
    mac = home / "Library" / "Application Support" / "Claude"
    mac.mkdir(parents=True)
    linux = linux_config(home).parent

    register(home, environ, "darwin")

    assert "bridge" in json.loads((mac / integrations.CLAUDE_DESKTOP_CONFIG).read_text())["mcpServers"]
    assert not (linux / integrations.CLAUDE_DESKTOP_CONFIG).exists(), "only the platform's own place is used"


def test_nothing_found_says_where_it_looked_and_what_to_do(home, environ):
    output = register(home, environ, "darwin")

    assert str(home / "Library" / "Application Support" / "Claude" / integrations.CLAUDE_DESKTOP_CONFIG) in output
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


@pytest.mark.e2e
def test_the_printed_line_registers_bridge_with_the_real_claude_code_cli(home, environ, tmp_path):
    claude = claude_bin()
    [line] = [line for line in register(home, environ, "linux").splitlines() if line.startswith("claude mcp add")]
    argv = [claude, *shlex.split(line)[1:]]
    cli_env = {"PATH": os.environ["PATH"], "HOME": str(home), "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1"}
    cli_env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] = "1"

    subprocess.run(argv, env=cli_env, cwd=tmp_path, check=True, capture_output=True, timeout=60)

    registered = json.loads((home / ".claude.json").read_text())["mcpServers"]["bridge"]
    assert registered["command"] == sys.executable
    assert registered["args"] == [MANAGE_PY, "mcp"]
    assert registered["env"]["BRIDGE_DATA_DIR"] == str(settings.DATA_DIR)
