"""`manage.py install_hermes_skill` on temporary homes: the skill matches the real API, configs are merged safely."""

import json
import re
import shlex
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import CommandError, call_command
from django.urls import resolve

from jobs.integrations import tool_configs
from jobs.web.api import CreateTaskIn, MergeIn, PermissionIn, PresetIn, RuleIn, TaskIdIn
from tests.support import MANAGE_PY, TOKEN

# Each test's own data dir: the address runbridge records and the skill's backups are read and written there.
pytestmark = pytest.mark.usefixtures("data_dir")

# Every POST example in the skill must be a body its endpoint accepts (the schemas refuse unknown fields).
BODY_SCHEMAS = {
    "/v1/task/create": CreateTaskIn,
    "/v1/task/permission": PermissionIn,
    "/v1/task/cancel": TaskIdIn,
    "/v1/task/merge": MergeIn,
    "/v1/task/discard": TaskIdIn,
    "/v1/rules": RuleIn,
    "/v1/rules/presets": PresetIn,
}


def install(home: Path, environ: dict, *args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("install_hermes_skill", *args, home=home, environ=environ, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def front_matter(text: str) -> tuple[dict, str]:
    assert text.startswith("---\n")
    head, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def all_files(root: Path) -> dict[Path, str]:
    return {path: path.read_text() for path in sorted(root.rglob("*")) if path.is_file()}


@pytest.fixture
def environ() -> dict:
    """The shared one (tests/conftest.py) without a Django secret: the skill's install reads no more than this."""
    return {"PATH": "", "BRIDGE_TOKEN": TOKEN}


@pytest.fixture
def hermes(home) -> Path:
    return home / ".hermes"


def skill_path(hermes: Path) -> Path:
    return hermes / "skills" / "software-development" / "bridge-claude-code" / "SKILL.md"


def test_the_skill_has_valid_front_matter(home, environ, hermes):
    install(home, environ)

    meta, body = front_matter(skill_path(hermes).read_text())
    assert meta["name"] == "bridge-claude-code"
    assert 20 < len(meta["description"]) <= 1024
    assert meta["version"]
    assert "claude-code" in meta["metadata"]["hermes"]["tags"]
    assert meta["required_environment_variables"][0]["name"] == "BRIDGE_TOKEN"
    assert body.lstrip().startswith("# ")
    category, _ = front_matter((hermes / "skills" / "software-development" / "DESCRIPTION.md").read_text())
    assert category["description"]
    assert not (hermes / "config.yaml").exists(), "the MCP server is only registered with --mcp"


def test_the_skill_names_every_endpoint_and_each_resolves(home, environ, hermes):
    install(home, environ)
    text = skill_path(hermes).read_text()

    paths = set(re.findall(r"\$B(/[\w/.]+)", text))
    for endpoint in (
        "/v1/task/create",
        "/v1/task/events",
        "/v1/task/output/stream",
        "/v1/permissions",
        "/v1/task/permission",
        "/v1/task/output",
        "/v1/task/cancel",
    ):
        assert endpoint in paths
    for path in paths:
        resolve(path)  # raises Resolver404 for a path Bridge does not serve
    assert "Authorization: Bearer $BRIDGE_TOKEN" in text
    assert "since=" in text


def test_every_request_body_in_the_skill_is_accepted_by_its_endpoint(home, environ, hermes):
    install(home, environ)
    text = skill_path(hermes).read_text()

    bodies = re.findall(r"\"\$B(/v1/[\w/]+)\"\s*\\?\s*-d '([^']*)'", text)
    assert {path for path, _ in bodies} == set(BODY_SCHEMAS)
    for path, body in bodies:
        BODY_SCHEMAS[path].model_validate(json.loads(body))


def test_the_url_option_is_used_and_checked(home, environ, hermes):
    install(home, environ, "--url", "http://10.1.2.3:9000/")

    assert "${BRIDGE_URL:-http://10.1.2.3:9000}" in skill_path(hermes).read_text()
    with pytest.raises(CommandError, match="--url"):
        install(home, environ, "--url", "10.1.2.3:9000")


def test_hermes_home_comes_from_the_environment(home, environ, tmp_path):
    environ["HERMES_HOME"] = str(tmp_path / "elsewhere")

    install(home, environ)

    assert skill_path(tmp_path / "elsewhere").exists()
    assert not (home / ".hermes").exists()


def test_an_existing_category_description_is_kept(home, environ, hermes):
    description = hermes / "skills" / "software-development" / "DESCRIPTION.md"
    description.parent.mkdir(parents=True)
    description.write_text("---\ndescription: mine\n---\n")

    install(home, environ)

    assert description.read_text() == "---\ndescription: mine\n---\n"


def test_mcp_registers_the_same_stdio_entry_as_claude_desktop_gets(home, environ, hermes):
    install(home, environ, "--mcp")

    bridge = yaml.safe_load((hermes / "config.yaml").read_text())["mcp_servers"]["bridge"]
    assert bridge["command"] == sys.executable
    assert bridge["args"] == [MANAGE_PY, "mcp"]
    assert bridge["env"]["BRIDGE_DATA_DIR"] == str(settings.DATA_DIR)


def test_mcp_keeps_everything_else_and_backs_up_the_old_config(home, environ, hermes):
    hermes.mkdir()
    original = (
        "# my settings\n"
        "model:\n  provider: custom\n  default: local-model\n"
        "mcp_servers:\n  files:\n    command: npx\n    args: [-y, fs]\n"
        "agent:\n  max_turns: 40\n"
    )
    (hermes / "config.yaml").write_text(original)

    output = install(home, environ, "--mcp")

    config = yaml.safe_load((hermes / "config.yaml").read_text())
    assert config["model"] == {"provider": "custom", "default": "local-model"}
    assert config["agent"] == {"max_turns": 40}
    assert config["mcp_servers"]["files"] == {"command": "npx", "args": ["-y", "fs"]}
    assert set(config["mcp_servers"]) == {"files", "bridge"}
    [backup] = hermes.glob("config.yaml.bak-*")
    assert backup.read_text() == original
    assert "comments" in output


def test_mcp_updates_an_existing_bridge_entry_without_duplicating_it(home, environ, hermes):
    hermes.mkdir()
    (hermes / "config.yaml").write_text("mcp_servers:\n  bridge:\n    command: /old/python\n    args: [old.py, mcp]\n")

    install(home, environ, "--mcp")
    output = install(home, environ, "--mcp")

    text = (hermes / "config.yaml").read_text()
    assert len(re.findall(r"^\s+bridge:", text, re.MULTILINE)) == 1
    assert yaml.safe_load(text)["mcp_servers"]["bridge"]["command"] == sys.executable
    assert "up to date" in output
    assert len(list(hermes.glob("config.yaml.bak-*"))) == 1


@pytest.mark.parametrize(
    "content, reason",
    [
        ("model: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "top level is not a YAML mapping"),
        ("mcp_servers: [bridge]\n", "'mcp_servers' is not a YAML mapping"),
    ],
)
def test_a_config_that_does_not_parse_is_refused_and_nothing_is_written(home, environ, hermes, content, reason):
    hermes.mkdir()
    (hermes / "config.yaml").write_text(content)

    with pytest.raises(CommandError) as refused:
        install(home, environ, "--mcp")

    assert str(hermes / "config.yaml") in str(refused.value)
    assert reason in str(refused.value)
    assert all_files(hermes) == {hermes / "config.yaml": content}


def test_print_writes_nothing(home, environ, hermes):
    hermes.mkdir()
    (hermes / "config.yaml").write_text("model:\n  provider: custom\n")
    before = all_files(hermes)

    output = install(home, environ, "--mcp", "--print")

    assert all_files(hermes) == before
    assert "+name: bridge-claude-code" in output
    assert "+  bridge:" in output
    assert "nothing written" in output


def test_no_token_in_any_written_file(home, environ, hermes):
    environ["BRIDGE_API_TOKEN"] = "brg_another_token_value"

    output = install(home, environ, "--mcp")

    written = all_files(hermes)
    assert len(written) == 3
    for text in [*written.values(), output]:
        assert TOKEN not in text
        assert "brg_another_token_value" not in text


# --- the address and the backup (issue 13.6) ----------------------------------------------------------------------


def test_without_url_the_running_bridges_address_is_used(home, environ, hermes, data_dir):
    tool_configs.record_server_url("http://127.0.0.1:8912")  # this process is alive: "running"

    output = install(home, environ)

    assert "${BRIDGE_URL:-http://127.0.0.1:8912}" in skill_path(hermes).read_text()
    assert "http://127.0.0.1:8912 (where the running Bridge listens; --url sets another)" in output


def test_without_url_a_stopped_bridges_last_address_is_used_and_said(home, environ, hermes, data_dir):
    stopped = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    record = {"url": "http://127.0.0.1:8913", "pid": int(stopped.stdout), "started": 1.0}
    (data_dir / tool_configs.SERVER_URL_FILE).write_text(json.dumps(record))

    output = install(home, environ)

    assert "${BRIDGE_URL:-http://127.0.0.1:8913}" in skill_path(hermes).read_text()
    assert "where Bridge last listened" in output and "not running now" in output


@pytest.mark.parametrize("recorded", [None, "not json", '{"url": "ftp://x"}', '{"port": 1}'])
def test_without_a_usable_record_the_default_is_used_and_said(home, environ, hermes, data_dir, recorded):
    if recorded is not None:
        (data_dir / tool_configs.SERVER_URL_FILE).write_text(recorded)

    output = install(home, environ)

    assert "${BRIDGE_URL:-http://127.0.0.1:8800}" in skill_path(hermes).read_text()
    assert "the default" in output


def test_the_old_skill_is_backed_up_outside_the_skill_library(home, environ, hermes, data_dir):
    install(home, environ, "--url", "http://127.0.0.1:8800")
    first = skill_path(hermes).read_text()

    output = install(home, environ, "--url", "http://127.0.0.1:8914")

    assert [p.name for p in skill_path(hermes).parent.iterdir()] == ["SKILL.md"]
    assert [p for p in (hermes / "skills").rglob("*") if ".bak" in p.name] == []
    [saved] = (data_dir / "backups").iterdir()
    assert saved.name.startswith("bridge-claude-code.SKILL.md.bak-")
    assert saved.read_text() == first
    assert str(saved) in output, "the command says where the old skill went"


def test_the_token_command_in_the_skill_works_as_printed(home, environ, hermes):
    install(home, environ)

    meta, body = front_matter(skill_path(hermes).read_text())
    command = shlex.join([sys.executable, MANAGE_PY, "token", "create", "hermes", "--scope", "decide"])
    assert meta["required_environment_variables"][0]["help"] == f"Make one on the Bridge host: {command}"
    assert f"`{command}`" in body
    assert "python manage.py" not in body
