"""Usage is per task: a follow-up in an agent session records what it used itself, not the session's running total.

Claude reports `total_cost_usd` as the session's running total across `--resume` (tests/fakes/NOTES.md, "Usage
across --resume"); `actions.finish_task` records the difference from the total the run carried on from. Integration
tests, on the test database: the delta tests drive the actions with generated sequences of reported totals; the page
and admin tests read what they show. The real CLI against the scripted fake Anthropic server is in
tests/e2e/test_usage_real.py.
"""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from jobs import actions
from jobs.core.vocabulary import Agent, Status
from jobs.models import AgentSession, Task
from jobs.web import reports
from tests.support import make_task

TOKENS = {"input_tokens": 100, "output_tokens": 5, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30}


# --- helpers --------------------------------------------------------------------------------------------------


@pytest.fixture
def worker():
    return actions.register_worker(capacity=100)


def start(worker, prompt: str = "go", *, session: str = "", agent: str = Agent.CLAUDE, cwd: Path | None = None):
    """Queue a task (a follow-up when `session` is given) and claim it: it is running from now on."""
    kwargs = {"agent": agent, "resume_session_id": session or None}
    if cwd is not None:
        kwargs["cwd"] = str(cwd)
    task = make_task(prompt, **kwargs)
    claimed = actions.claim_next_task(worker)
    assert claimed is not None and claimed.pk == task.pk
    return claimed


def start_beside(worker, *, session: str) -> Task:
    """A follow-up running while another run of its session still goes on. Bridge no longer starts one (one run per
    agent session: jobs/actions/runs.py), but runs recorded before that rule did overlap, and a session resumed by hand
    outside Bridge still can: their usage must still be shared right. So this marks it running as the claim would,
    without the claim's session rule."""
    task = make_task("go", agent=Agent.CLAUDE, resume_session_id=session)
    Task.objects.filter(pk=task.pk).update(status=Status.RUNNING, worker=worker, started_at=timezone.now())
    task.refresh_from_db()
    return task


def finish(task: Task, session_id: str, cost: float | None, **usage) -> Task:
    """What the supervisor does at the end: link the session the agent named, record the runner's outcome."""
    actions.link_session(task, session_id)
    figures = {**TOKENS, "num_turns": 1, **usage}
    if cost is not None:
        figures["cost_usd"] = cost
    return actions.finish_task(task, status=Status.DONE, exit_code=0, usage=figures)


def final_status(task: Task) -> dict:
    return [e.data for e in actions.events_since(task) if e.kind == "status"][-1]


def run_sequence(worker, work_root: Path, reported: list[float], session_id: str = "s-1") -> list[Task]:
    """One task, then follow-ups one after another, the agent reporting the running totals `reported`."""
    tasks = [finish(start(worker, cwd=work_root), session_id, reported[0])]
    for total in reported[1:]:
        tasks.append(finish(start(worker, session=session_id), session_id, total))
    return tasks


def running_totals(seed: int, n: int) -> list[float]:
    """A session's running totals, as the CLI reports them: never decreasing, some runs free (an API error)."""
    rng = random.Random(seed)
    total, totals = 0.0, []
    for _ in range(n):
        total += rng.choice([0.0, rng.uniform(0, 0.002), rng.uniform(0, 3.0)])
        totals.append(total)
    return totals


# --- the delta logic --------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(8))
def test_follow_ups_record_their_own_cost_and_sum_to_the_session_total(seed, work_root, worker):
    reported = running_totals(seed, n=2 + seed)
    tasks = run_sequence(worker, work_root, reported)

    own = [t.cost_usd for t in tasks]
    assert all(cost >= 0 for cost in own), own
    assert sum(own) == pytest.approx(reported[-1], abs=1e-9)
    steps = [b - a for a, b in zip([0.0, *reported], reported, strict=False)]
    assert own == pytest.approx(steps, abs=1e-9)
    session = AgentSession.objects.get(session_id="s-1")
    assert session.total_cost_usd == pytest.approx(sum(own), abs=1e-9)
    # tokens and turns are the run's own already: recorded as reported
    assert {(t.input_tokens, t.output_tokens, t.num_turns) for t in tasks} == {(100, 5, 1)}
    # the reported running total is kept in the status event, with where the base came from
    for task, total in zip(tasks, reported, strict=True):
        data = final_status(task)
        assert data["reported_usage"] == {"cost_usd": total}
        assert data["usage"]["cost_usd"] == task.cost_usd
    assert final_status(tasks[0])["usage_base_from"] == "new_session"
    for before, task in zip(tasks, tasks[1:], strict=False):
        assert final_status(task)["usage_base_from"] == f"task:{before.public_id}"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "reported",
    [
        [0.5, 0.3, 0.8],  # the agent's total went down (a lost fork): that run is charged 0, the next from 0.3
        [1.0, 1.0, 1.0],
        [0.2, 0.1, 0.05, 0.4],
        [0.0, 0.0, 0.7],
    ],
)
def test_a_lower_running_total_is_charged_nothing_and_kept_as_reported(reported, work_root, worker):
    tasks = run_sequence(worker, work_root, reported)

    own = [t.cost_usd for t in tasks]
    assert own == pytest.approx([max(0.0, b - a) for a, b in zip([0.0, *reported], reported, strict=False)])
    assert all(cost >= 0 for cost in own)
    assert AgentSession.objects.get().total_cost_usd == pytest.approx(sum(own))
    for task, total, before in zip(tasks, reported, [0.0, *reported], strict=False):
        data = final_status(task)
        assert data["reported_usage"]["cost_usd"] == total
        assert ("usage_note" in data) == (total < before)


@pytest.mark.django_db
@pytest.mark.parametrize("seed", range(5))
def test_two_tasks_resuming_one_session_at_once_are_each_charged_their_own_share(seed, work_root, worker):
    """Both runs carry on from the same total; the next resume from the one that finished last (as measured)."""
    rng = random.Random(seed)
    first = finish(start(worker, cwd=work_root), "s-1", 1.0)
    b, c = start(worker, session="s-1"), start_beside(worker, session="s-1")  # both running before either ends
    cost_b, cost_c, cost_d = (round(rng.uniform(0.01, 1), 6) for _ in range(3))
    ends = [(b, cost_b), (c, cost_c)]
    rng.shuffle(ends)
    for task, cost in ends:
        finish(task, "s-1", 1.0 + cost)
    last_total = 1.0 + ends[-1][1]  # the CLI's session file holds the total of the run that ended last
    d = finish(start(worker, session="s-1"), "s-1", last_total + cost_d)

    b.refresh_from_db()
    c.refresh_from_db()
    assert [t.cost_usd for t in (first, b, c, d)] == pytest.approx([1.0, cost_b, cost_c, cost_d])
    session = AgentSession.objects.get()
    assert session.total_cost_usd == pytest.approx(1.0 + cost_b + cost_c + cost_d)
    assert session.total_cost_usd == pytest.approx(sum(t.cost_usd for t in session.tasks.all()))
    assert final_status(d)["usage_base_from"] == f"task:{ends[-1][0].public_id}"


@pytest.mark.django_db
def test_a_session_begun_outside_bridge_records_the_reported_total_and_says_so(work_root, worker):
    first = finish(start(worker, session="from-elsewhere", cwd=work_root), "from-elsewhere", 0.9)
    data = final_status(first)
    assert first.cost_usd == 0.9 and data["usage_base_from"] == "unknown"
    assert "did not see this session begin" in data["usage_note"]
    second = finish(start(worker, session="from-elsewhere"), "from-elsewhere", 1.25)
    assert second.cost_usd == pytest.approx(0.35)
    assert "usage_note" not in final_status(second)
    assert AgentSession.objects.get().total_cost_usd == pytest.approx(1.25)


@pytest.mark.django_db
def test_runs_without_a_figure_are_skipped_and_older_rows_count_as_reported(work_root, worker):
    first = finish(start(worker, cwd=work_root), "s-1", 0.4)
    killed = start(worker, session="s-1")  # no result line: no usage at all
    actions.finish_task(killed, status=Status.FAILED, exit_code=143, error="killed")
    second = finish(start(worker, session="s-1"), "s-1", 0.6)
    assert second.cost_usd == pytest.approx(0.2)
    assert final_status(second)["usage_base_from"] == f"task:{first.public_id}"

    # a task recorded before Bridge kept the reported total stored that total as its cost
    legacy = start(worker, session="s-1")
    actions.finish_task(legacy, status=Status.DONE)
    Task.objects.filter(pk=legacy.pk).update(cost_usd=0.75)
    third = finish(start(worker, session="s-1"), "s-1", 1.0)
    assert third.cost_usd == pytest.approx(0.25)


@pytest.mark.django_db
def test_a_follow_up_of_a_session_still_running_starts_from_zero(work_root, worker):
    first = start(worker, cwd=work_root)
    actions.link_session(first, "s-1")
    follow_up = finish(start_beside(worker, session="s-1"), "s-1", 0.3)
    assert follow_up.cost_usd == pytest.approx(0.3)
    assert final_status(follow_up)["usage_base_from"] == "new_session"


@pytest.mark.django_db
def test_hermes_usage_is_per_prompt_and_recorded_as_reported(work_root, worker):
    tasks = [finish(start(worker, agent=Agent.HERMES, cwd=work_root), "h-1", None, input_tokens=300)]
    tasks.append(finish(start(worker, agent=Agent.HERMES, session="h-1"), "h-1", None, input_tokens=250))
    assert [t.input_tokens for t in tasks] == [300, 250]
    assert all("reported_usage" not in final_status(t) for t in tasks)


# --- what the pages show ----------------------------------------------------------------------------------------


@pytest.fixture
def signed_in(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="x"))
    return client


@pytest.mark.django_db
def test_usage_page_dashboard_and_task_page_show_own_costs_and_session_totals(work_root, worker, signed_in):
    tasks = run_sequence(worker, work_root, [0.000566, 0.001132, 0.001698])

    page = signed_in.get(reverse("usage")).content.decode()
    assert "$0.0017" in page and "$0.0034" not in page  # the sum of the three own costs, not of running totals
    rows = reports.usage_by_session()
    assert [(r["session_id"], r["tasks_count"], r["tokens"]) for r in rows] == [("s-1", 3, 315)]
    assert rows[0]["total_cost_usd"] == pytest.approx(0.001698)
    html = render_to_string("jobs/usage.html", {"by_session": rows, "by_day": [], "by_directory": []})
    assert 'id="sessions"' in html and "$0.0017" in html

    dashboard = signed_in.get(reverse("dashboard")).content.decode()
    assert dashboard.count("$0.0006") == 3 and "its session's total: $0.0017" in dashboard

    task_page = signed_in.get(reverse("task-page", args=[tasks[-1].public_id])).content.decode()
    total = re.search(r'id="session-cost" data-total="([^"]+)" data-includes-task="1">\$0\.0017<', task_page)
    assert total and float(total.group(1)) == pytest.approx(0.001698), task_page
    assert "Cost (this task)" in task_page


@pytest.mark.django_db
def test_admin_shows_each_tasks_own_cost_and_the_session_total(work_root, worker, signed_in):
    tasks = run_sequence(worker, work_root, [0.5, 0.75, 1.5])
    session = AgentSession.objects.get()

    listing = signed_in.get("/admin/jobs/agentsession/").content.decode()
    assert "$1.50<" in listing and '<td class="field-task_count">3</td>' in listing
    detail = signed_in.get(f"/admin/jobs/agentsession/{session.pk}/change/").content.decode()
    assert all(f"{cost}<" in detail for cost in ("$0.50", "$0.25", "$0.75"))

    tasks_listing = signed_in.get("/admin/jobs/task/").content.decode()
    assert tasks_listing.count("$0.25<") == 1 and "$1.50" not in tasks_listing
    change = signed_in.get(f"/admin/jobs/task/{tasks[-1].pk}/change/").content.decode()
    assert "$0.75<" in change and "$1.50 over" in change and "3 task(s) of its session" in change
    assert "running total $1.50; minus $0.75" in change


@given(st.floats(min_value=1e-6, max_value=1e9, allow_nan=False))
def test_the_value_axis_tops_out_at_a_round_number_above_the_largest_bar(value):
    top = reports.nice_top(value)
    assert value <= top < value * 10 + 1e-9
    mantissa = top / 10 ** math.floor(math.log10(top) + 1e-9)
    assert any(math.isclose(mantissa, step) for step in (1, 2, 5, 10))


@pytest.mark.django_db
def test_the_usage_charts_name_their_values(work_root, signed_in):
    """Issue 13.12: the charts had no axis values; each now names 0, half way and its top, in its unit."""
    for cost, tokens in ((0.42, 1200), (0.07, 300)):
        task = make_task("say hi")
        Task.objects.filter(pk=task.pk).update(cost_usd=cost, input_tokens=tokens, output_tokens=0)
    page = signed_in.get(reverse("usage")).content.decode()
    values = re.findall(r'class="tick value"[^>]*>([^<]+)<', page)
    assert values == ["$0.00", "$0.25", "$0.50", "0", "1,000", "2,000"], values
    bar = re.search(r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)"', page)
    top = reports.CHART_HEIGHT - reports.CHART_TOP
    assert float(bar.group(2)) == pytest.approx(top * 0.49 / 0.5, abs=0.1)  # the day's $0.49 against the $0.50 top
