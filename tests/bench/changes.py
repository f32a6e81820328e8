"""Benchmark (not collected by pytest): recording what a task changed in a repository (jobs/workspace/snapshots.py:
`take()` when it starts, `changes_since()` when it ends) beside plain git doing the same work, in one run.

    .venv/bin/python tests/bench/changes.py [--files 10000] [--edited 10] [--runs 5]

The repository is generated and committed once (FILES text files of 2,000 bytes in 40 lines, about 20 MB for 10,000,
a hundred to a folder, their mtimes an hour back so that git's stat cache is settled), packed, and copied so that each
side has its own index. Each round edits EDITED files (a line changed, a line added), untimed, and times each side:

- Bridge: take() before the edit plus changes_since() after it.
- plain, the goal's comparison: `git add -A && git write-tree` before the edit, the same after it, then `git diff-tree
  -r -M -p <before> <after>`. A record of a task's changes needs the working state at both ends (files may be
  untracked, staged or edited before the task starts), so this is the same git work without Bridge: the goal asks that
  recording cost at most 1.5× of it.
- plain once, for information: `git add -A && git write-tree && git diff --cached HEAD` after the edit. It is cheaper
  because it knows the start only as the last commit, which is not what the directory held when a task began.

The sides take turns going first; the best of RUNS is reported for each.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from jobs.workspace import snapshots  # noqa: E402
from tests.bench.table import Row, emit  # noqa: E402

RATIO_LIMIT = 1.5
# No gc in the background: it would pack the objects while the repository is being copied.
OPTIONS = ("-c", "user.name=Bench", "-c", "user.email=bench@example.com", "-c", "gc.auto=0")
LIMITS = snapshots.Limits(max_files=5000, max_bytes=4 * 1024 * 1024)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *OPTIONS, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def generated_repository(path: Path, files: int) -> tuple[list[Path], int]:
    """A repository of `files` committed text files, settled; the files and their size in bytes."""
    path.mkdir()
    git(path, "init", "--quiet", "--initial-branch=main")
    made, size, hour_ago = [], 0, time.time() - 3600
    for number in range(files):
        folder = path / f"dir{number // 100:03d}"
        folder.mkdir(exist_ok=True)
        text = "".join(os.urandom(24).hex() + "\n" for _ in range(40))
        made.append(folder / f"file{number:05d}.txt")
        made[-1].write_text(text)
        os.utime(made[-1], (hour_ago, hour_ago))
        size += len(text)
    git(path, "add", "--all")
    git(path, "commit", "--quiet", "-m", "generated")
    git(path, "gc", "--quiet")  # packed, as a repository of this size is once git has run its own gc
    return [file.relative_to(path) for file in made], size


def edit(repo: Path, files: list[Path], edited: int, run: int) -> None:
    """Change a line and add one in `edited` files spread over the tree, different ones each run."""
    step = len(files) // edited
    for number in range(edited):
        path = repo / files[(number * step + run * 7) % len(files)]
        lines = path.read_text().splitlines(keepends=True)
        lines[len(lines) // 2] = f"changed in run {run}\n"
        path.write_text("".join(lines) + f"added in run {run}\n")


def time_bridge(repo: Path, store: Path, files: list[Path], edited: int, run: int) -> float:
    started = time.perf_counter()
    snapshot = snapshots.take(repo, store, f"run{run}", LIMITS)
    took = time.perf_counter() - started
    edit(repo, files, edited, run)
    started = time.perf_counter()
    changes = snapshots.changes_since(snapshot, store, LIMITS)
    took += time.perf_counter() - started
    if snapshot.kind != "git" or len(changes.files) != edited:
        raise SystemExit(f"changes_since saw {len(changes.files)} files, not {edited}: {changes.reason or snapshot}")
    snapshots.forget(snapshot, store)
    return took


def time_plain_twice(repo: Path, files: list[Path], edited: int, run: int) -> float:
    started = time.perf_counter()
    git(repo, "add", "-A")
    before = git(repo, "write-tree").strip()
    took = time.perf_counter() - started
    edit(repo, files, edited, run)
    started = time.perf_counter()
    git(repo, "add", "-A")
    after = git(repo, "write-tree").strip()
    git(repo, "diff-tree", "-r", "-M", "-p", before, after)
    return took + time.perf_counter() - started


def time_plain_once(repo: Path, files: list[Path], edited: int, run: int) -> float:
    edit(repo, files, edited, run)
    started = time.perf_counter()
    git(repo, "add", "-A")
    git(repo, "write-tree")
    git(repo, "diff", "--cached", "HEAD")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--edited", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"bridge": [], "twice": [], "once": []}
    with tempfile.TemporaryDirectory(prefix="bridge-bench-changes-") as tmp:
        root = Path(tmp)
        (root / "gitconfig").touch()
        os.environ.update(GIT_CONFIG_GLOBAL=str(root / "gitconfig"), GIT_CONFIG_NOSYSTEM="1")  # the machine's stays out
        files, size = generated_repository(root / "bridge", args.files)
        for side in ("twice", "once"):
            shutil.copytree(root / "bridge", root / side, symlinks=True)
        sides = {
            "bridge": lambda run: time_bridge(root / "bridge", root / "store", files, args.edited, run),
            "twice": lambda run: time_plain_twice(root / "twice", files, args.edited, run),
            "once": lambda run: time_plain_once(root / "once", files, args.edited, run),
        }
        names = list(sides)
        for run in range(args.runs):
            for side in names[run % 3 :] + names[: run % 3]:  # each side goes first in turn
                times[side].append(sides[side](run))
    report(args, size, {side: min(taken) * 1000 for side, taken in times.items()})


def report(args: argparse.Namespace, size: int, best: dict[str, float]) -> None:
    what = f"{args.edited} of {args.files:,} files edited, {size / 1e6:.0f} MB, best of {args.runs}"
    emit(
        [
            Row(f"task changes: take() + changes_since(), {what}", best["bridge"], limit=best["twice"]),
            Row(
                "task changes: take() + changes_since() ÷ plain git at both ends",
                best["bridge"] / best["twice"],
                unit="×",
                goal=RATIO_LIMIT,
                limit=1.0,
                note=f"plain (add -A + write-tree) twice + diff-tree -p: {best['twice']:.0f} ms",
            ),
            Row(
                "task changes: take() + changes_since() ÷ plain git after the edit only",
                best["bridge"] / best["once"],
                unit="×",
                note=f"add -A + write-tree + diff --cached HEAD: {best['once']:.0f} ms (knows only HEAD as the start)",
            ),
        ]
    )


if __name__ == "__main__":
    main()
