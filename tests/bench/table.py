"""The one table `make bench` prints (issue 12): each goal, the measured value, its ratio to the goal, and the
machine's own limit measured in the same run where one applies.

A bench script makes `Row`s and calls `emit(rows)`: under `tests/bench/all.py` (BRIDGE_BENCH_ROWS names a file) they
are appended there as JSON lines and printed together at the end; run alone, the script prints its own table.
"""

import json
import os
import statistics
from dataclasses import asdict, dataclass

ROWS_FILE_VAR = "BRIDGE_BENCH_ROWS"


@dataclass
class Row:
    what: str
    measured: float | None  # None: could not be measured (`note` says why)
    unit: str = "ms"
    goal: float | None = None  # None: no goal, shown for information
    higher_is_better: bool = False  # True for throughputs: the goal is a floor, not a ceiling
    limit: float | None = None  # the same work without Bridge, measured in the same run
    note: str = ""

    def ratio(self) -> float | None:
        """How far from the goal: <= 1 meets it whichever way the goal points."""
        if self.goal is None or self.measured is None:
            return None
        top, bottom = (self.goal, self.measured) if self.higher_is_better else (self.measured, self.goal)
        if bottom == 0:
            return 0.0 if top == 0 else float("inf")
        return top / bottom


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def p50(values: list[float]) -> float:
    return statistics.median(values)


def ms(seconds: list[float]) -> list[float]:
    return [s * 1000 for s in seconds]


def emit(rows: list[Row]) -> None:
    path = os.environ.get(ROWS_FILE_VAR)
    if not path:
        print(render(rows))
        return
    with open(path, "a", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(asdict(row)) + "\n")


def load(path: str) -> list[Row]:
    with open(path, encoding="utf-8") as rows:
        return [Row(**json.loads(line)) for line in rows if line.strip()]


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "–"
    whole = abs(value) >= 100 or float(value).is_integer()
    text = f"{value:,.0f}" if whole else f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
    return f"{text} {unit}".strip()


def render(rows: list[Row]) -> str:
    header = ("what", "goal", "measured", "ratio", "limit (no Bridge)", "")
    lines = []
    for row in rows:
        ratio = row.ratio()
        goal = "–" if row.goal is None else ("≥ " if row.higher_is_better else "≤ ") + _number(row.goal, row.unit)
        mark = "" if ratio is None else ("ok" if ratio <= 1 else "MISSED")
        lines.append(
            (
                row.what,
                goal,
                _number(row.measured, row.unit),
                "–" if ratio is None else f"{ratio:.2f}",
                _number(row.limit, row.unit),
                " ".join(part for part in (mark, row.note) if part),
            )
        )
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines, strict=True)]
    out = [" | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) for line in [header, *lines]]
    out.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in out)
