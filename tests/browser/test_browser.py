"""The pages in real headless Chromium against a real `runbridge`: log in, create, watch, approve, deny, cancel,
continue, find in the admin; plus one run with the real Claude Code CLI against the scripted Anthropic server.

Debian's chromium (`make browser`) is driven by Playwright, which never downloads a browser of its own.
Synchronisation is Playwright's expect/wait_for on page state; screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from pathlib import Path

import pytest

from tests import bridge_server
from tests.bridge_server import BridgeServer
from tests.browser.chromium import ARTIFACTS, expect, logged_in, login_link, shot, start_browser
from tests.fakes.anthropic_server import FakeAnthropic, error, text, tool_use
from tests.support import fake_agent_script, python_script

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# A stand-in for `hermes acp` that replays a recorded ACP transcript (tests/fixtures/hermes/, named by the file
# `.replay` in its working directory): it waits for each line Bridge sends where Hermes did, and answers with what
# Hermes answered, so the real supervisor and ACP runner drive it, and a permission waits for the page's answer.
REPLAY_HERMES = """
import json, sys
from pathlib import Path
if "--version" in sys.argv:
    print("Hermes Agent v0.19.0")
    sys.exit(0)
for raw in Path(sys.argv[1], Path(".replay").read_text().strip()).read_text().splitlines():
    record = json.loads(raw)
    if record["dir"] == "out" and not sys.stdin.readline():
        sys.exit(0)
    if record["dir"] == "in":
        print(json.dumps(record["msg"]), flush=True)
sys.stdin.read()
"""

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    """runbridge with the fake stream-json agent (its prompt is a small script, see tests/fakes/fake_claude.py)."""
    root = tmp_path_factory.mktemp("browser")
    agent = fake_agent_script(root)
    (root / "replay_hermes.py").write_text(REPLAY_HERMES)
    # Installed as Bridge's readiness check expects Hermes (jobs/agents/executors.py): in an environment with the ACP
    # extra, and a config that chooses a model provider; else the supervisor leaves its tasks queued.
    venv = root / "hermes-venv"
    (venv / "lib" / "python3" / "site-packages" / "acp").mkdir(parents=True)
    (venv / "lib" / "python3" / "site-packages" / "acp" / "__init__.py").touch()
    hermes_home = root / "hermes-home"
    hermes_home.mkdir()
    (hermes_home / "config.yaml").write_text("model:\n  provider: custom\n")
    replay = f'"{sys.executable}" "{root / "replay_hermes.py"}" "{FIXTURES / "hermes"}"'
    hermes = python_script(venv / "bin" / "hermes", f'exec {replay} "$@"\n', first_line="#!/bin/sh")
    env = {"BRIDGE_KILL_GRACE_S": "1", "BRIDGE_HERMES_BIN": str(hermes), "BRIDGE_HERMES_MODE": "acp"}
    env["HERMES_HOME"] = str(hermes_home)
    with BridgeServer(root, "http://127.0.0.1:9", str(agent), env) as server:
        yield server


def new_task(page, bridge: BridgeServer, prompt: str, cwd: Path | None = None, agent: str = "claude") -> str:
    """Fill the new-task form; returns the task id from the page it lands on."""
    page.goto(bridge.url + "/tasks/new")
    page.select_option("select[name=agent]", agent)
    page.fill("textarea[name=prompt]", prompt)
    if cwd is not None:
        page.fill("input[name=cwd]", str(cwd))
    page.fill("input[name=timeout_s]", "60")
    page.click("#submit")
    page.wait_for_url(re.compile(r"/tasks/[0-9a-f-]{36}/$"))
    expect()(page.locator("#live")).not_to_have_text("connecting…")
    return page.url.rstrip("/").rsplit("/", 1)[1]


def workdir(bridge: BridgeServer, name: str) -> Path:
    path = bridge.work / name
    path.mkdir()
    return path


def card(page):
    return page.locator(".permission").first


# --- tests --------------------------------------------------------------------------------------------------


def test_the_login_link_logs_in_once(playwright_api, bridge, context, tmp_path):
    """The context fixture already used the link; a second browser cannot, and is sent to the login form."""
    fresh = start_browser(playwright_api, tmp_path / "other-profile")
    try:
        page = fresh.new_page()
        page.goto(login_link(bridge))
        expect()(page.locator("#error-message")).to_contain_text("has been used or has expired")
        page.goto(bridge.url + "/")
        page.wait_for_url(re.compile(r"/login/\?next=/$"))
        shot(page, "login")
    finally:
        fresh.close()


def test_create_a_task_and_watch_it_live_on_the_dashboard(context, bridge):
    dashboard = context.new_page()
    dashboard.goto(bridge.url + "/")
    expect()(dashboard.locator("#live")).to_have_text("live")
    page = context.new_page()
    task_id = new_task(page, bridge, "say Hello from the browser\nsay Second line of output")
    expect()(page.locator("#transcript")).to_contain_text("Hello from the browser")
    expect()(page.locator("#transcript")).to_contain_text("Second line of output")
    expect()(page.locator("#status")).to_have_text("done")
    expect()(page.locator("#cost")).to_have_text("$0.0123")
    expect()(page.locator("#outcome")).to_contain_text("Second line of output")
    row = dashboard.locator(f"#task-{task_id}")  # arrived over the websocket: the dashboard was never reloaded
    expect()(row).to_contain_text("say Hello from the browser")
    expect()(row.locator(".badge").first).to_have_text("Done")
    dashboard.close()
    page.close()


def test_a_directory_outside_the_allowed_roots_is_refused_with_the_reason(page, bridge):
    page.goto(bridge.url + "/tasks/new")
    page.fill("textarea[name=prompt]", "say hi")
    page.fill("input[name=cwd]", "/etc")
    page.click("#submit")
    expect()(page.locator("#form-error")).to_contain_text("outside the allowed roots")
    expect()(page.locator("textarea[name=prompt]")).to_have_value("say hi")  # nothing typed is lost
    shot(page, "new-task-refused")


def test_approve_a_permission_and_see_its_effect(page, bridge):
    cwd = workdir(bridge, "approve")
    prompt = (
        'say I will create approved.txt now.\nask Bash {"command": "touch approved.txt && echo made it"}\nsay finished'
    )
    new_task(page, bridge, prompt, cwd)
    expect()(card(page)).to_contain_text("touch approved.txt")
    expect()(card(page).locator(".state")).to_have_text("pending")
    shot(page, "task-permission")
    card(page).locator("button.allow").click()
    expect()(card(page).locator(".decision")).to_contain_text("allowed by user:admin via web")
    expect()(page.locator(".entry.tool .tool-output")).to_have_text("made it\n")
    expect()(page.locator("#status")).to_have_text("done")
    assert (cwd / "approved.txt").exists()
    page.locator(".entry.tool summary").click()
    shot(page, "task")


def test_deny_a_permission_with_a_message(page, bridge):
    cwd = workdir(bridge, "deny")
    new_task(page, bridge, 'ask Bash {"command": "touch denied.txt"}\nsay finished', cwd)
    card(page).locator("input.message").fill("not in this directory")
    card(page).locator("button.deny").click()
    expect()(card(page).locator(".decision")).to_contain_text("denied by user:admin via web — not in this directory")
    expect()(page.locator(".tool-output.failed")).to_have_text("not in this directory")
    expect()(page.locator("#status")).to_have_text("done")
    assert not (cwd / "denied.txt").exists()


def test_allow_with_edited_input(page, bridge):
    cwd = workdir(bridge, "edited")
    new_task(page, bridge, 'ask Bash {"command": "touch original.txt"}\nsay finished', cwd)
    card(page).locator("details.edit summary").click()
    card(page).locator("textarea.edited").fill(json.dumps({"command": "touch edited.txt"}))
    card(page).locator("button.allow-edited").click()
    expect()(card(page).locator(".decision")).to_contain_text("allowed (with edited input)")
    expect()(page.locator("#status")).to_have_text("done")
    assert (cwd / "edited.txt").exists() and not (cwd / "original.txt").exists()


def test_a_permission_answered_elsewhere_updates_the_card(page, bridge):
    cwd = workdir(bridge, "elsewhere")
    task_id = new_task(page, bridge, 'ask Bash {"command": "touch by-api.txt"}\nsay finished', cwd)
    expect()(card(page).locator(".state")).to_have_text("pending")
    request_id = card(page).get_attribute("id").removeprefix("perm-")
    bridge.ok(bridge.decide(task_id, "allow", request_id=request_id))
    expect()(card(page).locator(".decision")).to_contain_text("allowed by token:e2e via api")
    expect()(card(page).locator("form")).to_be_hidden()
    late = page.evaluate(
        """async (url) => {
            const body = new FormData(); body.append("behavior", "deny");
            const r = await fetch(url, {method: "POST", body, headers: {"X-CSRFToken": Bridge.csrfToken()}});
            return [r.status, (await r.json()).error];
        }""",
        f"/tasks/{task_id}/permissions/{request_id}",
    )
    assert late == [409, f"permission request {request_id} was already allowed via api; nothing was sent to the agent"]
    expect()(page.locator("#status")).to_have_text("done")
    assert (cwd / "by-api.txt").exists()
    decisions = [e for e in bridge.stream(task_id) if e["event"] == "permission_decision"]
    assert len(decisions) == 1


def test_cancel_a_running_task(page, bridge):
    new_task(page, bridge, "say about to wait\nsleep 60\nsay never said")
    expect()(page.locator("#transcript")).to_contain_text("about to wait")
    page.click("#cancel")
    expect()(page.locator(".message.success")).to_contain_text("Cancel requested")
    expect()(page.locator("#status")).to_have_text("cancelled")
    expect()(page.locator("#transcript")).to_contain_text("Cancel requested by user:admin")
    expect()(page.locator("#cancel-form")).to_be_hidden()
    page.eval_on_selector("#cancel-form", "form => form.submit()")  # a stale page cancelling a finished task
    expect()(page.locator(".message.error")).to_contain_text(
        "has already ended (cancelled); there is nothing to cancel"
    )
    assert "never said" not in page.locator("#transcript").inner_text()


def test_continue_a_finished_task_in_the_same_session(page, bridge):
    first_id = new_task(page, bridge, "say first turn")
    expect()(page.locator("#follow-up")).to_be_visible()
    session = page.locator("#transcript .entry", has_text="Agent session").inner_text().split()[2]
    page.fill("#follow-up textarea", "say second turn")
    page.click("#follow-up-submit")
    page.wait_for_url(re.compile(r"/tasks/[0-9a-f-]{36}/$"))
    assert first_id not in page.url
    expect()(page.locator(".message.success")).to_contain_text("same agent session")
    expect()(page.locator("#transcript")).to_contain_text("second turn")
    expect()(page.locator("#transcript")).to_contain_text(f"Agent session {session} started")


def test_find_a_task_in_the_admin_by_search(page, bridge):
    new_task(page, bridge, 'ask Bash {"command": "true"}\nsay zebra-crossing-7')
    card(page).locator("button.allow").click()
    expect()(page.locator("#status")).to_have_text("done")
    page.goto(bridge.url + "/admin/jobs/task/?q=zebra-crossing")
    rows = page.locator("#result_list tbody tr")
    expect()(rows).to_have_count(1)
    rows.first.locator("th a").click()
    expect()(page.locator("#content")).to_contain_text("zebra-crossing-7")
    inline = page.locator(".inline-group")
    expect()(inline).to_contain_text("Allowed")
    expect()(inline).to_contain_text("user:admin")
    expect()(inline).to_contain_text("Web")
    shot(page, "admin-task")
    page.get_by_text(re.compile(r"\d+ events, paged")).click()
    expect()(page.locator("#result_list")).to_contain_text("zebra-crossing-7")


def test_usage_page_draws_its_chart(page, bridge):
    """With a task of its own: under xdist this test may be the first of the module on its worker's server."""
    new_task(page, bridge, "say charted")
    expect()(page.locator("#status")).to_have_text("done")
    page.goto(bridge.url + "/usage/")
    expect()(page.locator("svg.chart rect.bar").first).to_be_visible()
    expect()(page.locator("table.tasks").last).to_contain_text(str(bridge.work))
    shot(page, "usage")
    page.goto(bridge.url + "/")
    expect()(page.locator("#live")).to_have_text("live")
    shot(page, "dashboard")


def test_output_reaches_the_page_quickly(page, bridge):
    """Median time from the agent printing a line to that line appearing in the page (same clock, same host)."""
    page.add_init_script(
        """window.arrivals = {};
        new MutationObserver((records) => {
            const now = performance.timeOrigin + performance.now();
            for (const r of records) {
                const m = /^stamp ([0-9.]+)$/.exec(r.target.textContent || "");
                if (m && !(m[1] in window.arrivals)) window.arrivals[m[1]] = now;
            }
        }).observe(document, {childList: true, subtree: true, characterData: true});"""
    )
    count = 40
    new_task(page, bridge, f"say warming up\nstamp {count} 0.05")
    expect()(page.locator("#status")).to_have_text("done")
    arrivals = page.evaluate("window.arrivals")
    assert len(arrivals) == count, f"{len(arrivals)} of {count} stamps were seen arriving"
    delays_ms = sorted((arrived - float(stamp) * 1000) for stamp, arrived in arrivals.items())
    median = statistics.median(delays_ms)
    ARTIFACTS.mkdir(exist_ok=True)
    report = f"agent line -> browser page: median {median:.1f} ms, max {delays_ms[-1]:.1f} ms over {count} lines\n"
    (ARTIFACTS / "latency.txt").write_text(report)
    print(report)
    assert median < 1000, report


# --- issue 13: what the task page says -------------------------------------------------------------------------


def hermes_task(page, bridge: BridgeServer, fixture: str, prompt: str) -> str:
    cwd = workdir(bridge, fixture)
    (cwd / ".replay").write_text(f"{fixture}.jsonl")
    return new_task(page, bridge, prompt, cwd, agent="hermes")


def transcript_text(page) -> str:
    return page.locator("#transcript").inner_text()


def test_a_hermes_task_reads_as_words_and_its_question_as_what_it_asks(page, bridge):
    """13.8: no "model undefined", no raw agent_info, no "Result (undefined) after ? turns", the answer once, the
    card titled with Hermes' own question and no edited-input option (ACP cannot change a tool's input)."""
    hermes_task(page, bridge, "acp_perm_allow", "Write a.txt")
    expect()(card(page).locator(".state")).to_have_text("pending")
    expect()(card(page).locator("strong")).to_have_text("Hermes Agent asks: Approve edit: a.txt")
    expect()(card(page).locator("details.edit")).to_be_hidden()
    card(page).locator("button.allow").click()
    expect()(card(page).locator(".decision")).to_contain_text("allowed by user:admin via web")
    expect()(page.locator("#status")).to_have_text("done")
    text = transcript_text(page)
    assert "hermes-agent 0.19.0 is ready (Agent Client Protocol 1)" in text
    assert re.search(r"Agent session [0-9a-f-]{36} started \(mode default\)", text)
    assert "The agent's turn finished" in text
    assert 'Hermes Agent asked: Approve edit: a.txt\n"Approve edit: a.txt": allowed by user:admin via web' in text
    for wrong in ("undefined", "agent_info", "? turns", "{"):
        assert wrong not in text, (wrong, text)
    expect()(page.locator(".entry.assistant")).to_have_count(1)
    expect()(page.locator(".entry.assistant")).to_have_text("Wrote it.")
    expect()(page.locator("#tokens")).to_have_text("200 / 3")
    expect()(page.locator("#cost")).to_have_text("not reported")  # as the dashboard and the usage page say it
    expect()(page.locator("#permission-mode")).to_contain_text("ask for what Hermes asks about")
    shot(page, "task-hermes")


def test_hermes_tool_output_is_rendered_not_shown_as_markdown(page, bridge):
    hermes_task(page, bridge, "acp_terminal", "Write hi into t.txt with the terminal.")
    expect()(page.locator("#status")).to_have_text("done")
    output = page.locator(".entry.tool .tool-output")
    expect()(output.locator("strong")).to_have_text("exit_code:")
    expect()(output.locator("li")).to_have_text("exit_code: 0")
    assert "**" not in output.inner_text()
    expect()(page.locator(".entry.assistant")).to_have_text("Ran it.")
    page.locator(".entry.tool summary").click()
    shot(page, "task-hermes-tool")


def test_a_resumed_hermes_session_shows_its_history_by_speaker(page, bridge):
    """13.8: the history a resumed ACP session replays came as one raw line per chunk, glued together."""
    first = hermes_task(page, bridge, "acp_plain", "Say hello")
    expect()(page.locator("#status")).to_have_text("done")
    (bridge.work / "acp_plain" / ".replay").write_text("acp_resume2.jsonl")
    page.fill("#follow-up textarea", "And again")
    page.click("#follow-up-submit")
    page.wait_for_url(re.compile(r"/tasks/[0-9a-f-]{36}/$"))
    assert first not in page.url
    expect()(page.locator("#status")).to_have_text("done")
    history = page.locator(".entry.history")
    history.locator("summary").click()
    expect()(history.locator(".history-turn")).to_have_text(["You: Say hello", "Hermes Agent: First answer."])
    expect()(page.locator(".entry.assistant")).to_have_text("Second answer.")
    assert "history:" not in transcript_text(page)
    assert re.search(r"Agent session [0-9a-f-]{36} resumed", transcript_text(page))


def test_a_cancelled_claude_task_shows_no_protocol_lines_and_its_tokens(page, bridge):
    """13.9: no raw control_response line, tokens next to the cost, the end of the turn in words."""
    new_task(page, bridge, "sleep 60")
    expect()(page.locator("#transcript")).to_contain_text("Process")
    page.click("#cancel")
    expect()(page.locator("#status")).to_have_text("cancelled")
    expect()(page.locator("#transcript")).to_contain_text("The agent's turn stopped during execution after 1 turn")
    text = transcript_text(page)
    assert "control_response" not in text and "Result (" not in text
    expect()(page.locator("#tokens")).to_have_text("100 / 50")


def test_a_failed_claude_turn_says_it_ended_with_an_error(page, bridge):
    new_task(page, bridge, "error the API is out of credits")
    expect()(page.locator("#status")).to_have_text("failed")
    expect()(page.locator(".entry.error").last).to_have_text("The agent's turn ended with an error after 1 turn")
    assert "success, error" not in transcript_text(page)


def test_the_tool_call_shows_the_input_that_was_allowed(page, bridge):
    """13.9: after "Allow with edited input" the tool card showed the agent's original input."""
    cwd = workdir(bridge, "edited-card")
    new_task(page, bridge, 'ask Bash {"command": "touch original.txt"}\nsay finished', cwd)
    card(page).locator("details.edit summary").click()
    card(page).locator("textarea.edited").fill(json.dumps({"command": "touch edited.txt"}))
    card(page).locator("button.allow-edited").click()
    expect()(page.locator("#status")).to_have_text("done")
    tool = page.locator(".entry.tool")
    expect()(tool.locator("summary")).to_contain_text("input edited before it ran")
    expect()(tool.locator(".tool-input")).to_contain_text("touch edited.txt")
    assert "original.txt" not in tool.locator(".tool-input").inner_text()


def test_a_question_left_open_by_an_ended_task_offers_no_answer_and_says_why(page, bridge):
    """13.7: the agent ignores the interrupt and is killed with its question open; the card says who closed it
    and why, as recorded, and offers no Allow/Deny that could reach no one."""
    task_id = new_task(page, bridge, 'deaf\nask Bash {"command": "touch never.txt"}\nsay never')
    expect()(card(page).locator(".state")).to_have_text("pending")
    page.click("#cancel")
    expect()(page.locator("#status")).to_have_text("cancelled")
    expect()(card(page).locator("button.allow")).to_be_hidden()
    expect()(card(page).locator("button.deny")).to_be_hidden()
    [recorded] = [e["data"]["data"] for e in bridge.stream(task_id) if e["event"] == "permission_decision"]
    assert (recorded["status"], recorded["decided_via"]) == ("cancelled", "supervisor") and recorded["message"]
    expected = f"cancelled by {recorded['decided_by'] or 'Bridge'} — {recorded['message']}"
    expect()(card(page).locator(".decision")).to_have_text(expected)
    assert "withdrew" not in expected
    shot(page, "task-question-closed")


def test_a_run_that_ended_without_reporting_a_cost_says_so_as_the_dashboard_does(page, bridge):
    """Issue 29: "not reported" (as Hermes' tasks always are), on the task page and the dashboard alike, not "–"."""
    task_id = new_task(page, bridge, "say about to crash\ncrash 3")
    expect()(page.locator("#status")).to_have_text("failed")
    expect()(page.locator("#cost")).to_have_text("not reported")
    page.goto(bridge.url + "/")
    expect()(page.locator(f"#task-{task_id} td.cost")).to_have_text("not reported")


def test_a_finished_page_drops_task_queued(page, bridge):
    new_task(page, bridge, "say quick")
    expect()(page.locator("#status")).to_have_text("done")
    expect()(page.locator(".message", has_text="Task queued.")).to_have_count(0)


def test_the_dashboard_counts_cancelled_tasks_live(context, bridge):
    dashboard = context.new_page()
    dashboard.goto(bridge.url + "/")
    expect()(dashboard.locator("#live")).to_have_text("live")
    before = int(dashboard.locator("#count-cancelled").inner_text())
    page = context.new_page()
    new_task(page, bridge, "sleep 60")
    page.click("#cancel")
    expect()(page.locator("#status")).to_have_text("cancelled")
    expect()(dashboard.locator("#count-cancelled")).to_have_text(str(before + 1))
    page.close()
    dashboard.close()


# --- issue 29: imported history, and a session's total ----------------------------------------------------------


def test_an_imported_task_says_where_it_came_from_in_its_transcript_its_page_and_the_dashboard(page, bridge):
    """The `imported` event reads as one line in words (it was a raw `imported: {…}` dump); the page and the
    dashboard's row name the older tool and the old id."""
    jobs = bridge.root / "legacy-jobs"
    jobs.mkdir()
    record = {"status": "ok", "exit_code": 0, "task": "tidy the notes", "cwd": "/srv/notes"}
    record |= {"started_at": "2025-01-02T03:04:05Z", "finished_at": "2025-01-02T03:14:05Z"}
    (jobs / "job-7.json").write_text(json.dumps({**record, "session_id": "20250101_000000_abcdef"}))
    (jobs / "job-7.log").write_text("tidied\n")
    bridge_server.run_manage(["import_legacy", "--mcp-jobs", str(jobs)], bridge.env)

    page.goto(bridge.url + "/tasks/job-7/")
    came_from = re.escape(f"Imported from claude-hermes-bridge (old id job-7), read from {jobs / 'job-7.json'} on ")
    expect()(page.locator("#transcript .entry").first).to_have_text(
        re.compile(f"^{came_from}.+; its agent session 20250101_000000_abcdef$")
    )
    expect()(page.locator("#status")).to_have_text("done")
    expect()(page.locator("#imported-from")).to_have_text("Imported from claude-hermes-bridge (old id job-7)")
    assert "imported:" not in transcript_text(page) and "{" not in transcript_text(page)
    shot(page, "task-imported")

    task_id = page.locator("#task").get_attribute("data-task-id")
    page.goto(bridge.url + "/")
    badge = page.locator(f"#task-{task_id} .badge.imported")
    expect()(badge).to_have_text("imported")
    expect()(badge).to_have_attribute("title", "imported from claude-hermes-bridge; old id job-7")
    shot(page, "dashboard-imported")


def test_a_hermes_sessions_total_says_not_reported_live_and_after_a_reload(page, bridge):
    """Hermes reports no cost: the session total said "$0.0000" where the dashboard and /usage/ say "not reported",
    both as the page's script kept it once the task ended and as the page is rendered afterwards."""
    cwd = workdir(bridge, "session-total")
    (cwd / ".replay").write_text("acp_plain.jsonl")
    new_task(page, bridge, "Say hello", cwd, agent="hermes")
    expect()(page.locator("#status")).to_have_text("done")
    expect()(page.locator("#session-cost")).to_have_text("not reported")
    page.reload()
    expect()(page.locator("#live")).not_to_have_text("connecting…")
    expect()(page.locator("#session-cost")).to_have_text("not reported")
    session_id = page.locator("#session").inner_text()
    page.goto(bridge.url + "/usage/")
    row = page.locator("#sessions tr", has=page.locator(f'a[title="{session_id}"]'))
    expect()(row.locator("td[data-label=Agent]")).to_have_text("Hermes Agent")
    expect()(row.locator("td[data-label='Session total']")).to_have_text("not reported")


# --- the real Claude Code CLI ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_bridge(tmp_path_factory):
    claude = bridge_server.claude_bin()
    retry_once = {"CLAUDE_CODE_MAX_RETRIES": "1"}  # so an overloaded API shows up as one api_retry event
    root = tmp_path_factory.mktemp("real")
    with FakeAnthropic() as fake, BridgeServer(root, fake.url, claude, retry_once) as server:
        server.fake = fake
        yield server


@pytest.fixture(scope="module")
def real_context(playwright_api, real_bridge, tmp_path_factory):
    """One browser for the real-CLI tests: the login link works once."""
    ctx = logged_in(playwright_api, real_bridge, tmp_path_factory.mktemp("real-profile"), timeout_ms=30_000)
    yield ctx
    ctx.close()


@pytest.fixture
def script(real_bridge):
    """This test's replies, on a server a failed earlier test may have left replies on. Printed after the test, so
    shown only when it fails: when the CLI asked the scripted server what, and the server's log."""
    script = bridge_server.Script(real_bridge.fake)
    started = time.monotonic()
    yield script
    log = real_bridge.fake.log
    asked = [f"{entry['at'] - started:.2f}s {entry['class']}" for entry in log if entry["at"] >= started]
    print(f"the CLI asked the scripted server: {asked}\n{real_bridge.output()}")


def test_real_claude_code_asks_and_answers_in_the_browser(real_context, real_bridge, script):
    script.push(
        error(529, "overloaded"),
        tool_use("Bash", {"command": "touch from-claude.txt", "description": "make a file"}),
        text("I created from-claude.txt."),
    )
    page = real_context.new_page()
    try:
        cwd = workdir(real_bridge, "real")
        new_task(page, real_bridge, "Create from-claude.txt.", cwd)
        expect()(page.locator(".entry.warning")).to_contain_text("API error, retrying (attempt 1 of 1")
        expect()(card(page)).to_contain_text("touch from-claude.txt")
        card(page).locator("button.allow").click()
        expect()(page.locator("#status")).to_have_text("done")
        expect()(page.locator(".entry.assistant").last).to_have_text("I created from-claude.txt.")
        expect()(page.locator(".entry.tool")).to_contain_text("Bash")
        assert (cwd / "from-claude.txt").exists()
        shot(page, "task-real-claude")
    finally:
        page.close()


def test_the_readme_screenshot_of_a_task_waiting_for_a_decision(real_context, real_bridge, script):
    """docs/task-page.png, as the README shows it: the real CLI, a real-looking task, a question waiting for a
    person. Written to tests/artifacts/readme-task-page.png; copy it to docs/ when the page's look changes."""
    cwd = workdir(real_bridge, "greeter")
    (cwd / "Makefile").write_text("test:\n\t.venv/bin/python -m pytest -q\n")
    (cwd / "CONTRIBUTING.md").write_text("# Contributing\n\nOpen an issue first.\n")
    look = "grep -n -A1 '^test:' Makefile"
    line = "- Run the tests with `make test` (it runs .venv/bin/python -m pytest -q)."
    command = f"echo '{line}' >> CONTRIBUTING.md"
    script.push(
        tool_use("Bash", {"command": look, "description": "Find how the tests are run"}),
        tool_use("Bash", {"command": command, "description": "Say in CONTRIBUTING.md how to run the tests"}),
        text("CONTRIBUTING.md now says to run the tests with `make test`, as the Makefile does."),
    )
    page = real_context.new_page()
    try:
        prompt = "Add a line to CONTRIBUTING.md saying how to run the tests, the way the Makefile runs them."
        new_task(page, real_bridge, prompt, cwd)
        expect()(card(page).locator(".state")).to_have_text("pending")
        expect()(card(page)).to_contain_text(">> CONTRIBUTING.md")
        expect()(page.locator(".entry.tool .tool-output").first).to_contain_text(".venv/bin/python -m pytest -q")
        expect()(page.locator("#status")).to_have_text("running")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "readme-task-page.png"))
        card(page).locator("button.allow").click()
        expect()(page.locator("#status")).to_have_text("done")
        assert (cwd / "CONTRIBUTING.md").read_text().endswith(line + "\n")
    finally:
        page.close()
