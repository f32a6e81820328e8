"""Usage figures for the usage page: cost and tokens per day, per working directory and per agent session, and an
SVG bar chart.

A task's cost is what that task used itself (a follow-up is not charged again for its session's earlier turns:
jobs/actions/runs.py, `own_usage`), so sums over tasks are sums of money spent, and a session's total is the sum of
its tasks.
"""

import math
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Count, F, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

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


def _totals(queryset):
    return queryset.annotate(
        tasks=Count("id"),
        cost=Coalesce(Sum("cost_usd"), 0.0),
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
    """The costliest agent sessions: each one's total (the sum of its tasks' own costs) and its tasks."""
    sessions = AgentSession.objects.annotate(tasks_count=Count("tasks"), tokens=Coalesce(Sum(_tokens("tasks__")), 0))
    rows = sessions.values("pk", "agent", "session_id", "title", "cwd", "total_cost_usd", "tasks_count", "tokens")
    return list(rows.order_by("-total_cost_usd", "-pk")[:limit])


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
