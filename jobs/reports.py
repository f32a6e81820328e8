"""Usage figures for the usage page: cost and tokens per day and per working directory, and an SVG bar chart."""

from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Count, F, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from jobs.models import Task

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


def _totals(queryset):
    return queryset.annotate(
        tasks=Count("id"),
        cost=Coalesce(Sum("cost_usd"), 0.0),
        tokens=Coalesce(Sum(F("input_tokens") + F("output_tokens")), 0),
    )


def usage_by_day(days: int = 30) -> list[dict]:
    since = timezone.now() - timedelta(days=days)
    rows = _totals(
        Task.objects.filter(created_at__gte=since).annotate(day=TruncDate("created_at")).values("day")
    ).order_by("day")
    return list(rows)


def usage_by_directory() -> list[dict]:
    return list(_totals(Task.objects.values("cwd")).order_by("-cost", "cwd"))


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
