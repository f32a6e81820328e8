"""Usage figures for the usage page: cost and tokens per day, per working directory and per agent session, and an
SVG bar chart.

A task's cost is what that task used itself (a follow-up is not charged again for its session's earlier turns:
jobs/actions/runs.py, `own_usage`), so sums over tasks are sums of money spent, and a session's total is the sum of
its tasks.
"""

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Count, F, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from jobs.models import AgentSession, Task

CHART_WIDTH = 720
CHART_HEIGHT = 180
MAX_BAR_WIDTH = 48


@dataclass
class Bar:
    label: str
    value: float
    x: float
    y: float
    width: float
    height: float


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
    rows = AgentSession.objects.annotate(tasks_count=Count("tasks"), tokens=Coalesce(Sum(_tokens("tasks__")), 0))
    rows = rows.values("pk", "agent", "session_id", "title", "cwd", "total_cost_usd", "tasks_count", "tokens")
    return list(rows.order_by("-total_cost_usd", "-pk")[:limit])


def bar_chart(rows: list[dict], label_key: str, value_key: str) -> list[Bar]:
    """Bars for a server-side SVG (no JavaScript, no CDN): heights scaled to the largest value."""
    if not rows:
        return []
    top = max(float(row[value_key] or 0) for row in rows) or 1.0
    slot = CHART_WIDTH / len(rows)
    width = max(2.0, min(MAX_BAR_WIDTH, slot * 0.7))
    bars = []
    for i, row in enumerate(rows):
        value = float(row[value_key] or 0)
        height = (CHART_HEIGHT - 20) * value / top
        bars.append(
            Bar(
                label=str(row[label_key]),
                value=value,
                x=i * slot + (slot - width) / 2,
                y=CHART_HEIGHT - height,
                width=width,
                height=height,
            )
        )
    return bars
