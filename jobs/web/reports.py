"""Usage figures for the usage page: cost and tokens per day, per working directory and per agent session, and an
SVG bar chart.

A task's cost is what that task used itself (a follow-up is not charged again for its session's earlier turns:
jobs/actions/runs.py, `own_usage`), so sums over tasks are sums of money spent, and a session's total is the sum of
its tasks.

A cost that was never reported is not a cost of $0: Hermes Agent reports none (one-shot Hermes no tokens either), so
each figure comes with how many finished tasks reported no cost, and a figure with no reported cost at all is None.
Every page shows them alike (templates/jobs/_cost.html): the dashboard's rows and each table here.
"""

import math
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from jobs.agents import registry
from jobs.core.vocabulary import TERMINAL_STATUSES
from jobs.models import AgentSession, Task

CHART_WIDTH = 720
CHART_HEIGHT = 180
CHART_LEFT = 64  # room for the value axis' labels
CHART_TOP = 10
MAX_BAR_WIDTH = 48


@dataclass
class Bar:
    label: str
    value: float
    x: float
    y: float
    width: float
    height: float


@dataclass
class Tick:
    label: str
    y: float


@dataclass
class Chart:
    bars: list[Bar] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)  # the value axis: 0, half way, the top


def _tokens(prefix: str = ""):
    """Input plus output tokens, counting a missing figure as 0 (Hermes one-shot reports none)."""
    return Coalesce(F(f"{prefix}input_tokens"), 0) + Coalesce(F(f"{prefix}output_tokens"), 0)


def _reported(prefix: str = "") -> Q:
    """Tasks that reported a cost."""
    return Q(**{f"{prefix}cost_usd__isnull": False})


def _unreported(prefix: str = "") -> Q:
    """Tasks that ran and ended without reporting a cost (the dashboard's rule: templates/jobs/_task_row.html)."""
    return Q(
        **{
            f"{prefix}cost_usd__isnull": True,
            f"{prefix}started_at__isnull": False,
            f"{prefix}status__in": list(TERMINAL_STATUSES),
        }
    )


def _totals(queryset):
    """Per group: its tasks, their tokens, the cost they reported (None when none did), and how many did not."""
    return queryset.annotate(
        tasks=Count("id"),
        cost=Sum("cost_usd"),
        unreported=Count("id", filter=_unreported()),
        tokens=Coalesce(Sum(_tokens()), 0),
    )


def usage_by_day(days: int = 30) -> list[dict]:
    since = timezone.now() - timedelta(days=days)
    rows = _totals(
        Task.objects.filter(created_at__gte=since).annotate(day=TruncDate("created_at")).values("day")
    ).order_by("day")
    return list(rows)


def usage_by_directory() -> list[dict]:
    rows = _totals(Task.objects.values("cwd")).annotate(sessions=Count("session", distinct=True))
    return list(rows.order_by("-cost", "cwd"))


def usage_by_session(limit: int = 50) -> list[dict]:
    """The costliest agent sessions: each one's total (the sum of its tasks' own costs, None when none reported one),
    its tasks, and its agent by the name the dashboard gives it (`agent_label`)."""
    sessions = AgentSession.objects.annotate(
        tasks_count=Count("tasks"),
        tokens=Coalesce(Sum(_tokens("tasks__")), 0),
        reported=Count("tasks", filter=_reported("tasks__")),
        unreported=Count("tasks", filter=_unreported("tasks__")),
    )
    fields = ("pk", "agent", "session_id", "title", "cwd", "total_cost_usd", "tasks_count", "tokens")
    rows = list(sessions.values(*fields, "reported", "unreported").order_by("-total_cost_usd", "-pk")[:limit])
    for row in rows:
        row["cost"] = row["total_cost_usd"] if row.pop("reported") else None
        row["agent_label"] = registry.label(row["agent"])
    return rows


def session_total(session: AgentSession) -> dict:
    """One session's total as usage_by_session gives it, for templates/jobs/_cost.html: `cost` (None when none of its
    tasks reported one) and `unreported`."""
    counts = session.tasks.aggregate(
        reported=Count("id", filter=_reported()), unreported=Count("id", filter=_unreported())
    )
    return {"cost": session.total_cost_usd if counts["reported"] else None, "unreported": counts["unreported"]}


def nice_top(value: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten at or above `value`, so the axis reads in round numbers."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def axis_label(value: float, money: bool) -> str:
    if money:  # cents, or as many decimals as a small round value needs ($0.025)
        places = next((p for p in range(2, 8) if math.isclose(round(value, p), value, abs_tol=1e-12)), 8)
        return f"${value:,.{places}f}"
    return f"{value / 1000:g}k" if value >= 10_000 else f"{value:,.0f}"


def bar_chart(rows: list[dict], label_key: str, value_key: str, *, money: bool = False) -> Chart:
    """Bars for a server-side SVG (no JavaScript, no CDN), scaled to a round top that the value axis names."""
    if not rows:
        return Chart()
    top = nice_top(max(float(row[value_key] or 0) for row in rows))
    plot_height = CHART_HEIGHT - CHART_TOP
    slot = (CHART_WIDTH - CHART_LEFT) / len(rows)
    width = max(2.0, min(MAX_BAR_WIDTH, slot * 0.7))
    bars = []
    for i, row in enumerate(rows):
        value = float(row[value_key] or 0)
        height = plot_height * value / top
        bars.append(
            Bar(
                label=str(row[label_key]),
                value=value,
                x=CHART_LEFT + i * slot + (slot - width) / 2,
                y=CHART_HEIGHT - height,
                width=width,
                height=height,
            )
        )
    ticks = [Tick(axis_label(top * part, money), CHART_HEIGHT - plot_height * part) for part in (0, 0.5, 1)]
    return Chart(bars, ticks)
