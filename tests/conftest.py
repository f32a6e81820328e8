"""Shared fixtures: confined work roots, the fake agent, an in-process supervisor, and the temporary home of
`manage.py register_claude` (helpers: tests/support.py)."""

import os
import threading
from pathlib import Path

import pytest

from tests import server_logs
from tests.support import FAKES, TOKEN, database_url, fake_agent_script, python_script

# The test process is a machine where Claude Code has an account: its supervisors (in-process and started from here)
# record Claude as ready and claim its tasks, which the fake agent runs (jobs/actions/workers.py, `can_run`). Tests
# of readiness give the environment they judge explicitly; the real CLI's tests build theirs (tests/fakes/claude_env).
os.environ.setdefault("ANTHROPIC_API_KEY", "unused-by-the-fake-agent")


@pytest.fixture(scope="session")
def ready_agents(tmp_path_factory) -> dict[str, Path]:
    """A fake Claude Code and a fake Hermes (a console script, with a config that chooses a model provider)."""
    home = tmp_path_factory.mktemp("ready-agents")
    hermes_home = home / "hermes-home"
    hermes_home.mkdir()
    (hermes_home / "config.yaml").write_text("model:\n  provider: custom\n")
    hermes = python_script(
        home / "hermes-venv" / "bin" / "hermes",
        f"import runpy\nrunpy.run_path({str(FAKES / 'fake_hermes.py')!r}, run_name='__main__')\n",
    )
    return {"claude": Path(fake_agent_script(home)), "hermes": hermes, "hermes_home": hermes_home}


@pytest.fixture(autouse=True)
def agents_ready_here(settings, ready_agents) -> None:
    """Every test starts on a machine where both executors can run (the fakes), so a supervisor registered in this
    process records them ready and claims their tasks; a test about an executor sets its own after this."""
    settings.BRIDGE_CLAUDE_BIN = str(ready_agents["claude"])
    settings.BRIDGE_HERMES_BIN = str(ready_agents["hermes"])
    settings.BRIDGE_HERMES_HOME = ready_agents["hermes_home"]


@pytest.fixture
def work_root(tmp_path, settings) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    settings.BRIDGE_ALLOWED_ROOTS = [root]
    settings.BRIDGE_DEFAULT_CWD = root
    return root.resolve()


@pytest.fixture
def fake_agent(tmp_path, settings) -> Path:
    """Point BRIDGE_CLAUDE_BIN at the fake stream-json agent, with short grace periods."""
    script = Path(fake_agent_script(tmp_path))
    settings.BRIDGE_CLAUDE_BIN = str(script)
    settings.BRIDGE_KILL_GRACE_S = 1
    settings.BRIDGE_DRAIN_S = 0
    settings.BRIDGE_POLL_S = 0.2
    # The fake agent's tests read its pids (and its children's) from here, outside any PID namespace; the sandbox has
    # tests of its own (tests/integration/test_sandbox.py), and the real CLIs run inside it in tests/e2e/.
    settings.BRIDGE_SANDBOX = "off"
    return script


@pytest.fixture
def supervisor(transactional_db, work_root, fake_agent, settings):
    from jobs.supervision.supervisor import Supervisor

    sup = Supervisor()
    thread = threading.Thread(target=sup.run, daemon=True)
    thread.start()
    assert sup.ready.wait(10), "the supervisor did not start"
    yield sup
    sup.request_stop()
    thread.join(30)
    assert not thread.is_alive(), "the supervisor did not stop"


@pytest.fixture
def mcp_env(transactional_db, work_root, fake_agent, settings, tmp_path) -> dict[str, str]:
    """The environment of a `manage.py mcp` on the test database, with no Hermes installed."""
    data = tmp_path / "mcp-data"
    data.mkdir()
    return {
        **os.environ,
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "BRIDGE_DATA_DIR": str(data),
        "BRIDGE_CLAUDE_BIN": settings.BRIDGE_CLAUDE_BIN,
        "BRIDGE_ALLOWED_ROOTS": str(work_root),
        "BRIDGE_KILL_GRACE_S": "1",
        "BRIDGE_SANDBOX": settings.BRIDGE_SANDBOX,
        "BRIDGE_POLL_S": "0.1",
        "BRIDGE_HERMES_BIN": str(tmp_path / "no-such-hermes"),
        "HERMES_HOME": str(tmp_path / "hermes-home"),
        "ANTHROPIC_API_KEY": "unused-by-the-fake-agent",  # so jobs/agents/executors.py counts Claude as logged in
    }


# --- `manage.py register_claude` on a temporary home (tests/unit/test_register_claude.py and its e2e test) ---------


@pytest.fixture
def data_dir(settings, tmp_path) -> Path:
    """Each test's own data dir: the address a running Bridge recorded in the real one must not leak in. (The
    register_claude modules apply it to every test: `pytestmark = pytest.mark.usefixtures("data_dir")`.)"""
    settings.DATA_DIR = tmp_path / "data"
    settings.DATA_DIR.mkdir()
    return settings.DATA_DIR


@pytest.fixture
def home(tmp_path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def environ() -> dict:
    return {"PATH": "", "BRIDGE_TOKEN": TOKEN, "DJANGO_SECRET_KEY": "not-for-others"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report ends with the last lines of every Bridge server it had running (before its fixtures
    stop them), so a failure seen once in CI can be read there."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for path in sorted(server_logs.RUNNING):
            report.sections.append((f"log of the server in {path.parent.name} (last lines)", server_logs.tail(path)))
