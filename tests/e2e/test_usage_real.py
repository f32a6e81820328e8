"""End to end: follow-ups in one Claude Code session, the real CLI run by a Bridge server against the scripted fake
Anthropic server on 127.0.0.1, each record their own cost, not the session's running total the CLI reports, also
when two resume the session at once (the delta logic's integration tests are in tests/integration/test_usage.py)."""

import sqlite3

import pytest

from tests.bridge_server import BridgeServer, Script
from tests.fakes.anthropic_server import slow_text, text


def run_to_end(bridge: BridgeServer, task_id: str) -> dict:
    events = list(bridge.stream(task_id))
    assert events and events[-1]["event"] == "end", events[-3:]
    assert events[-1]["data"]["status"] == "done", bridge.task(task_id)
    return bridge.task(task_id)


def session_total(bridge: BridgeServer, session_id: str) -> float:
    """AgentSession.total_cost_usd, read from the server's database (no interface shows it yet)."""
    uri = f"file:{bridge.data_dir / 'bridge.sqlite3'}?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        [(total,)] = db.execute("SELECT total_cost_usd FROM jobs_agentsession WHERE session_id = ?", [session_id])
    return total


def own_cost(bridge: BridgeServer, task_id: str) -> float:
    return bridge.output_of(task_id)["task"]["usage"]["total_cost_usd"]


@pytest.mark.e2e
def test_e2e_follow_ups_record_equal_own_costs(bridge, fake, tmp_path):
    script = Script(fake)
    cwd = bridge.work / "follow-ups"
    cwd.mkdir()
    script.push(text("one two three"), text("one two three"), text("one two three"))
    first = bridge.create_task("Say three words.", cwd)
    session_id = run_to_end(bridge, first)["session_id"]
    tasks = [first]
    for _ in range(2):
        tasks.append(bridge.create_task("Again.", cwd, sessionId=session_id))
        run_to_end(bridge, tasks[-1])

    costs = [own_cost(bridge, t) for t in tasks]
    assert costs[0] > 0 and costs == [costs[0]] * 3, costs
    assert session_total(bridge, session_id) == pytest.approx(sum(costs))
    reported = [
        [e for e in bridge.ok(bridge.get("/v1/task/events", task_id=t))["events"] if e["kind"] == "result"][-1]
        for t in tasks
    ]
    running = [r["data"]["total_cost_usd"] for r in reported]
    assert running == pytest.approx([costs[0], 2 * costs[0], 3 * costs[0]])  # what the CLI reports: running totals

    # two follow-ups sent at once (each slow enough to overlap, were they let), then one more: the second waits for
    # the first (one run per agent session), and each is charged the same as one run
    script.push(slow_text("one two three", 1.0), slow_text("one two three", 1.0), text("one two three"))
    both = [bridge.create_task(f"At once {i}.", cwd, sessionId=session_id) for i in (1, 2)]
    ends = [run_to_end(bridge, task_id) for task_id in both]
    assert ends[1]["started_at"] >= ends[0]["finished_at"], "two runs of one session overlapped"
    tasks += both
    tasks.append(bridge.create_task("After both.", cwd, sessionId=session_id))
    run_to_end(bridge, tasks[-1])
    costs = [own_cost(bridge, t) for t in tasks]
    assert costs == pytest.approx([costs[0]] * 6), costs
    assert session_total(bridge, session_id) == pytest.approx(sum(costs))
