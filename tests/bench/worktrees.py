"""Benchmark (not collected by pytest): making a task's git worktree (jobs/workspace/worktrees.py `create()`) beside a
plain `git worktree add <dir> <commit>` of the same commit, in one run.

    .venv/bin/python tests/bench/worktrees.py [--files 10000] [--runs 5]

The repository is generated and committed once: FILES files of 2,000 characters each (about 20 MB for 10,000), a
hundred to a folder. Each side makes its worktree RUNS times, each time into a fresh directory removed (untimed)
before the next, the two sides taking turns (each going first in every other round); the best time of each is
reported, and their ratio against its limit.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from jobs.workspace import worktrees  # noqa: E402
from tests.bench.table import Row, emit, p50  # noqa: E402

RATIO_LIMIT = 1.5
IDENTITY = ("-c", "user.name=Bench", "-c", "user.email=bench@example.com")


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *IDENTITY, *args], cwd=cwd, check=True, capture_output=True)


def generated_repository(path: Path, files: int) -> int:
    """A repository of `files` committed files of random text; its size in bytes."""
    path.mkdir()
    git(path, "init", "--quiet", "--initial-branch=main")
    size = 0
    for number in range(files):
        folder = path / f"dir{number // 100:03d}"
        folder.mkdir(exist_ok=True)
        text = os.urandom(1000).hex()
        (folder / f"file{number:05d}.txt").write_text(text)
        size += len(text)
    git(path, "add", "--all")
    git(path, "commit", "--quiet", "-m", "generated")
    return size


def time_create(repo: Path, under: Path, run: int) -> float:
    started = time.perf_counter()
    wt = worktrees.create(repo, under, f"bench{run}")
    took = time.perf_counter() - started
    worktrees.remove(wt)
    return took


def time_plain(repo: Path, under: Path, run: int, commit: str) -> float:
    directory = under / f"plain{run}"
    started = time.perf_counter()
    subprocess.run(["git", "worktree", "add", "--quiet", str(directory), commit], cwd=repo, check=True)
    took = time.perf_counter() - started
    git(repo, "worktree", "remove", "--force", str(directory))
    return took


def round_of(repo: Path, root: Path, run: int, commit: str) -> dict[str, float]:
    """One time of each side; which goes first alternates, so neither always follows the other's removal."""
    sides = {
        "create": lambda: time_create(repo, root / "bridge", run),
        "plain": lambda: time_plain(repo, root / "plain", run, commit),
    }
    order = ["create", "plain"] if run % 2 == 0 else ["plain", "create"]
    return {side: sides[side]() for side in order}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bridge-bench-worktrees-") as tmp:
        root = Path(tmp)
        config = root / "gitconfig"
        config.touch()
        os.environ.update(GIT_CONFIG_GLOBAL=str(config), GIT_CONFIG_NOSYSTEM="1")  # the machine's config stays out
        repo = root / "project"
        size = generated_repository(repo, args.files)
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True)
        created, plain = [], []
        for run in range(args.runs):
            one_round = round_of(repo, root, run, commit.stdout.strip())
            created.append(one_round["create"])
            plain.append(one_round["plain"])
    best, best_plain = min(created) * 1000, min(plain) * 1000
    what = f"{args.files:,} files, {size / 1e6:.0f} MB"
    emit(
        [
            Row(f"task worktree: create(), {what}, best of {args.runs}", best, limit=best_plain),
            Row(
                "task worktree: create() ÷ plain git worktree add",
                best / best_plain,
                unit="×",
                goal=RATIO_LIMIT,
                limit=1.0,
                note=f"plain `git worktree add <dir> <commit>` best of {args.runs}: {best_plain:.0f} ms; medians: "
                f"create() {p50(created) * 1000:.0f} ms, plain {p50(plain) * 1000:.0f} ms",
            ),
        ]
    )


if __name__ == "__main__":
    main()
