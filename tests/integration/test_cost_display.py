"""Issue 29: a cost, and an agent's name, read the same on the dashboard, /usage/ and the task page.

Hermes Agent reports no cost (over ACP its tokens, one-shot nothing at all). The dashboard showed such a task's cost
as "–" while /usage/ counted it as $0.0000 in its directory's and its session's sums, and the task page's session
total read "$0.0000"; all now say "not reported" (templates/jobs/_cost.html), and a sum says how many of its tasks
reported none. The usage page's session table said "hermes" where the dashboard says "Hermes Agent". (How the page's
script keeps the total once a task ends: tests/browser/test_browser.py.)
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from jobs import actions
from jobs.core.vocabulary import Agent, Status
from jobs.models import Task
from tests.support import make_task

pytestmark = pytest.mark.django_db

COST_CELL_RE = re.compile(r'<td data-label="(Cost|Session total)" class="num cost"[^>]*>(.*?)</td>', re.S)
SESSION_ROW_RE = re.compile(r'<tr><td data-label="Session">.*?</tr>', re.S)
CELL_RE = r'<td data-label="{label}"[^>]*>(.*?)</td>'
SESSION_TOTAL_RE = re.compile(r'<span [^>]*id="session-cost"[^>]*>(.*?)</span></div>', re.S)
ACP_TOKENS = {"input_tokens": 200, "output_tokens": 3}
CLAUDE_COST = {"cost_usd": 0.0123, **ACP_TOKENS}


@pytest.fixture
def signed_in(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    return client


@pytest.fixture
def worker():
    return actions.register_worker(capacity=100)


def run(worker, agent: str, cwd: Path, session_id: str, usage: dict | None) -> Task:
    """A task running under `worker` (marked so as its claim would: the claim is not what these tests are about)
    and, unless `usage` is None, finished with what its agent reported."""
    task = make_task("go", agent=agent, cwd=str(cwd))
    Task.objects.filter(pk=task.pk).update(status=Status.RUNNING, worker=worker, started_at=timezone.now())
    task.refresh_from_db()
    actions.link_session(task, session_id)
    if usage is not None:
        actions.finish_task(task, status=Status.DONE, exit_code=0, usage=usage)
    return task


def as_read(fragment: str) -> str:
    """HTML as a reader sees it: tags gone, entities read, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def cost_cells(page: str) -> list[str]:
    """The text of every cost cell on a page, in order."""
    return [as_read(cell) for _, cell in COST_CELL_RE.findall(page)]


def cell(row: str, label: str) -> str:
    found = re.search(CELL_RE.format(label=label), row, re.S)
    assert found is not None, f"no {label} cell in {row}"
    return as_read(found.group(1))


def session_total_on_task_page(client: Client, task: Task) -> str:
    page = client.get(reverse("task-page", args=[task.public_id])).content.decode()
    found = SESSION_TOTAL_RE.search(page)
    assert found is not None, "the task page shows no session total"
    return as_read(found.group(1))


@pytest.mark.parametrize(
    "agent, usage, shown",
    [
        (Agent.HERMES, ACP_TOKENS, "not reported"),  # Hermes over ACP: tokens, no cost
        (Agent.HERMES, {}, "not reported"),  # one-shot Hermes: nothing at all
        (Agent.CLAUDE, CLAUDE_COST, "$0.0123"),
        (Agent.HERMES, None, "–"),  # still running: nothing to report yet
    ],
    ids=["hermes-acp", "hermes-one-shot", "claude", "running"],
)
def test_a_tasks_cost_reads_the_same_on_the_dashboard_and_on_the_usage_page(
    work_root, worker, signed_in, agent, usage, shown
):
    run(worker, agent, work_root, "s-1", usage)
    [on_dashboard] = cost_cells(signed_in.get(reverse("dashboard")).content.decode())
    by_day, by_directory, by_session = cost_cells(signed_in.get(reverse("usage")).content.decode())
    assert on_dashboard == by_day == by_directory == by_session == shown


def test_a_sum_over_tasks_some_of_which_reported_no_cost_says_how_many(work_root, worker, signed_in):
    run(worker, Agent.CLAUDE, work_root, "s-1", {"cost_usd": 0.5})
    for session in ("h-1", "h-2"):
        run(worker, Agent.HERMES, work_root, session, ACP_TOKENS)
    by_day, by_directory, *by_session = cost_cells(signed_in.get(reverse("usage")).content.decode())
    assert by_day == by_directory == "$0.5000 (2 not reported)"
    assert sorted(by_session) == ["$0.5000", "not reported", "not reported"]


@pytest.mark.parametrize(
    "runs, shown",
    [
        ([(Agent.HERMES, ACP_TOKENS)], "not reported"),  # Hermes over ACP: tokens, no cost
        ([(Agent.HERMES, {}), (Agent.HERMES, {})], "not reported"),  # one-shot Hermes: nothing at all, twice
        ([(Agent.CLAUDE, CLAUDE_COST), (Agent.CLAUDE, CLAUDE_COST)], "$0.0246"),
        ([(Agent.CLAUDE, CLAUDE_COST), (Agent.CLAUDE, {})], "$0.0123 (1 not reported)"),  # a run cut short
    ],
    ids=["hermes-acp", "hermes-one-shot", "claude", "claude-one-unreported"],
)
def test_the_task_pages_session_total_reads_as_the_usage_pages(work_root, worker, signed_in, runs, shown):
    tasks = [run(worker, agent, work_root, "s-1", usage) for agent, usage in runs]
    [session_row] = SESSION_ROW_RE.findall(signed_in.get(reverse("usage")).content.decode())

    assert cell(session_row, "Session total") == shown
    assert [session_total_on_task_page(signed_in, task) for task in tasks] == [shown] * len(tasks)


@pytest.mark.parametrize("agent", list(Agent))
def test_the_usage_pages_sessions_name_their_agent_as_the_dashboard_does(work_root, worker, signed_in, agent):
    run(worker, agent, work_root, "s-1", {})
    [session_row] = SESSION_ROW_RE.findall(signed_in.get(reverse("usage")).content.decode())
    dashboard = signed_in.get(reverse("dashboard")).content.decode()

    assert cell(session_row, "Agent") == cell(dashboard, "Agent") == agent.label
