"""What an agent can read of a running Bridge's environment (jobs/processes/private_env.py): nothing it is not given.

A real `manage.py runbridge` (its supervisor, web processes and watchdog) is started with canaries among its
variables; a fake agent, told to by its task, reads every process's /proc/<pid>/environ it can. With the sandbox off,
so that only the sealing keeps the canaries out of reach, it must find none. A process started with the same
canaries but not sealed must be found: that shows the agent's search would see a leak.
"""

import json
import subprocess
import sys

import psutil
import pytest

from jobs.processes import private_env
from tests.bridge_server import BridgeServer, data_events

CANARY = "canary-5b1d8e0a2f"
SECRETS = ("AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "BRIDGE_TEST_SECRET")
COUNT_CANARIES = f"cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c {CANARY}"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/<pid>/environ, which Linux has")


def agent_output(bridge: BridgeServer, command: str) -> str:
    """What `command` printed when the fake agent ran it as a Bash tool call, allowed by bypass mode."""
    task_id = bridge.create_task(f"ask Bash {json.dumps({'command': command})}", bridge.work, permission_mode="bypass")
    events = data_events(list(bridge.stream(task_id)))
    results = [e["data"]["data"] for e in events if e["data"]["kind"] == "tool_result"]
    assert len(results) == 1, events
    return str(results[0]["content"])


@pytest.fixture
def bridge(tmp_path, fake_agent):
    env = {name: f"{CANARY}-{name}" for name in SECRETS} | {"BRIDGE_SANDBOX": "off", "BRIDGE_WEB_PROCESSES": "2"}
    with BridgeServer(tmp_path, "http://127.0.0.1:9", str(fake_agent), env) as server:
        yield server


def test_an_agent_finds_no_secret_in_any_bridge_process(bridge):
    assert int(agent_output(bridge, COUNT_CANARIES)) == 0

    unsealed = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
        env={name: f"{CANARY}-{name}" for name in SECRETS},
        stdin=subprocess.PIPE,
    )
    try:
        assert int(agent_output(bridge, COUNT_CANARIES)) == len(SECRETS), "the same search finds a leak"
    finally:
        unsealed.communicate(timeout=30)


def test_every_bridge_process_shows_only_the_visible_environment(bridge):
    agent_output(bridge, "true")  # the supervisor has started its watchdog by now
    server = psutil.Process(bridge.proc.pid)
    bridge_processes = [server, *server.children(recursive=True)]
    assert len(bridge_processes) >= 4, "runbridge, two web processes and the watchdog"
    for process in bridge_processes:
        shown = process.environ().keys() - {private_env.FD_VARIABLE}  # a descriptor's number, nothing more
        assert shown <= {*private_env.VISIBLE_NAMES, *(n for n in shown if n.startswith(private_env.VISIBLE_PREFIXES))}
        assert not shown & set(SECRETS), process.cmdline()


def test_the_agent_still_gets_what_it_is_allowed(bridge):
    """Sealing hides the environment from /proc, not from Bridge: the allow-list reaches the agent as before."""
    assert agent_output(bridge, "echo $ANTHROPIC_API_KEY") == "sk-ant-fake-offline-key\n"
    assert agent_output(bridge, "echo ${OPENAI_API_KEY:-withheld}") == "withheld\n"
