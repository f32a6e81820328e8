"""Every executor by name (issue 33), through the service layer and its adapters: GET /v1/agents says what each
offers and whether it can run; a task is checked against what its agent offers before it is queued; Gemini sessions
resume only from the minute after they started; MCP's agent_run takes any agent by name. The agents file's own rules
are in tests/unit/test_agents_file.py; the real Gemini CLI end to end in tests/e2e/test_gemini.py."""

import json
import math
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.actions.tasks import check_resumable_now
from jobs.actions.tokens import create_token
from jobs.agents import registry
from jobs.core.errors import Conflict
from jobs.core.vocabulary import Status
from jobs.management.commands.install_hermes_skill import render_skill
from jobs.models import AgentSession, Task
from tests.integration.test_mcp import Session, over_stdio

DECLARED = '[agents.mine]\nprotocol = "acp"\ncommand = ["/opt/mine/bin/mine", "--acp"]\nskip_mode = "full-auto"\n'


@pytest.fixture
def api(db, work_root):
    """POST /v1/task/create and GET over the test client, with a token of full scope."""
    client = Client(HTTP_AUTHORIZATION=f"Bearer {create_token('tests')[1]}")

    def call(method: str, path: str, body: dict | None = None):
        if method == "get":
            return client.get(path)
        return client.post(path, json.dumps(body), content_type="application/json")

    return call


def create(api, **body):
    return api("post", "/v1/task/create", {"prompt": "say hi", **body})


@pytest.fixture
def agents_file(tmp_path, settings):
    path = tmp_path / "agents.toml"
    path.write_text(DECLARED)
    settings.BRIDGE_AGENTS_FILE = path
    registry.check_agents_file()
    yield path
    registry._loaded.clear()


def test_the_agents_endpoint_lists_every_executor_with_what_it_offers_and_its_readiness(api, agents_file):
    agents = {agent["name"]: agent for agent in api("get", "/v1/agents").json()["agents"]}

    assert list(agents) == ["claude", "hermes", *registry.PRESETS, "mine"]
    mine = agents["mine"]
    assert (mine["protocol"], mine["source"], mine["options"]) == ("acp", str(agents_file), ["model"])
    assert mine["modes"] == ["approve", "bypass", "skip"] and agents["opencode"]["modes"] == ["approve", "bypass"]
    assert mine["readiness"]["found"] is False and mine["readiness"]["ready"] == "no"
    assert "[agents.mine]" in mine["readiness"]["problems"][0]["fix"]
    assert any("resumes a session only from the minute" in limit for limit in agents["gemini"]["limits"])
    assert agents["claude"]["readiness"]["ready"] == "yes"  # the fake agent, with a key in the environment


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"agent": "nobody"}, "unknown agent 'nobody'; this Bridge runs: claude, hermes, gemini, qwen"),
        ({"agent": "gemini", "max_turns": 3}, "gemini tasks take no 'max_turns' option (it is Claude Code's"),
        ({"agent": "mine", "allowed_tools": ["Bash"]}, "mine tasks take no 'allowed_tools' option"),
        ({"agent": "opencode", "skip_permissions": True}, "opencode offers no mode that asks nothing"),
        ({"agent": "gemini", "permission_mode": "acceptEdits"}, "permission_mode 'acceptEdits' is Claude Code's"),
    ],
)
def test_a_task_asking_for_what_its_agent_does_not_offer_is_refused_and_nothing_is_queued(
    api,
    agents_file,
    body,
    words,
):
    response = create(api, **body)
    assert response.status_code == 400, response.content
    assert words in response.json()["error"]
    assert Task.objects.count() == 0


def test_a_declared_agent_and_a_preset_take_their_tasks(api, agents_file):
    for body in ({"agent": "mine", "model": "m-1", "skip_permissions": True}, {"agent": "gemini"}):
        response = create(api, **body)
        assert response.status_code == 200, response.content
    assert sorted(Task.objects.values_list("agent", "permission_mode")) == [("gemini", "approve"), ("mine", "skip")]


def floor_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


@hypothesis_settings(max_examples=200, deadline=None)
@given(
    started=st.datetimes(min_value=datetime(2026, 1, 1), max_value=datetime(2027, 1, 1), timezones=st.just(UTC)),
    after=st.timedeltas(min_value=timedelta(0), max_value=timedelta(minutes=3)),
)
def test_a_gemini_session_resumes_only_from_the_minute_after_it_started(started, after):
    session = AgentSession(agent="gemini", session_id="s", cwd="/", created_at=started)
    now = started + after
    if floor_minute(now) > floor_minute(started):
        check_resumable_now(session, now)
        return
    with pytest.raises(Conflict) as refused:
        check_resumable_now(session, now)
    next_minute = floor_minute(started) + timedelta(minutes=1)
    assert f"only from {next_minute:%H:%M:%S} UTC" in refused.value.message
    assert refused.value.detail["retry_after_s"] == math.ceil((next_minute - now).total_seconds())
    check_resumable_now(AgentSession(agent="claude", session_id="s", cwd="/", created_at=started), now)


def test_a_gemini_resume_within_the_first_minute_is_refused_on_rest(api, agents_file, work_root):
    session = AgentSession.objects.create(agent="gemini", session_id="g-1", cwd=str(work_root))
    response = create(api, agent="gemini", sessionId=session.session_id)
    assert response.status_code == 409 and "erase its history" in response.json()["error"], response.content

    AgentSession.objects.filter(pk=session.pk).update(created_at=datetime.now(UTC) - timedelta(minutes=2))
    assert create(api, agent="gemini", sessionId=session.session_id).status_code == 200


def test_mcp_agent_run_takes_any_agent_by_name_and_health_lists_them(mcp_env, supervisor, work_root):
    async def steps(session: Session):
        done = await session.call("agent_run", agent="claude", task="say by name", cwd=str(work_root), wait_s=60)
        unknown = await session.call("agent_run", agent="nobody", task="say hi", cwd=str(work_root))
        health = await session.call("hermes_health")
        return done, unknown, health

    done, unknown, health = over_stdio(mcp_env, steps)
    assert done.status == "STATUS: ok" and done.text.endswith("| by name"), done
    assert unknown.is_error and "unknown agent 'nobody'; this Bridge runs: claude, hermes, gemini" in unknown.text
    assert f"AGENTS: {', '.join(registry.agent_names())}" in health.text, health
    task = Task.objects.get()
    assert (task.agent, task.source, task.status) == ("claude", "mcp", Status.DONE)


def test_the_new_task_form_offers_every_agent_with_its_limits_and_queues_a_declared_ones_task(
    agents_file, browser, work_root
):
    page = browser.get("/tasks/new").content.decode()
    for name in registry.agent_names():
        assert f'<option value="{name}"' in page, name
    assert 'id="agent-mine"' in page and "cannot run here" in page
    assert "Resumes a session only from the minute after it started" in page

    response = browser.post("/tasks/new", {"agent": "mine", "prompt": "say hi", "permission_mode": "approve"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Task.objects.get().agent == "mine"


def test_the_hermes_skill_names_every_agent_this_bridge_runs(agents_file):
    skill = render_skill("http://127.0.0.1:8800")
    named = re.search(r"this Bridge also runs (.*?):", skill.replace("\n", " ")).group(1)
    assert named == ", ".join(f"`{name}`" for name in registry.agent_names() if name != "claude")
    assert "`mine`" in named and "`gemini`" in named


def test_the_dashboard_tells_a_declared_agent_that_cannot_run_and_not_the_presets_nobody_installed(
    agents_file, browser
):
    page = browser.get("/").content.decode()
    assert "mine cannot run" in page
    for name in registry.PRESETS:
        assert f"{name} cannot run" not in page, name
