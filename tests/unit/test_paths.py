"""Confinement by each platform's path rules: Windows drive letters and case, and folders a file system names in
more than one way. The claim query's prefilter of the same rule, on the database, is in
tests/integration/test_claim_paths.py."""

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.core import paths
from jobs.core.paths import is_inside, within
from tests.support import COMPONENT, COMPONENTS, REPO, posix, recased

WINDOWS_CASES = [
    ("C:/Users/Me/Work/project", "c:/users/me/work", True),
    ("C:\\Users\\me\\WORK", "c:/users/me/work", True),
    ("D:/Users/me/work/project", "C:/Users/me/work", False),
    ("C:/Users/me/workshop", "C:/Users/me/work", False),
    ("C:/Users/me", "C:/Users/me/work", False),
]


@pytest.mark.parametrize("path, root, inside", WINDOWS_CASES)
def test_windows_paths_compare_by_drive_and_without_case(path, root, inside):
    assert is_inside(PureWindowsPath(path), [PureWindowsPath(root)]) is inside


POSIX_CASES = [  # path, root, inside on Linux, inside on macOS
    ("/Users/Me/Work/project", "/users/me/work", False, True),
    ("/Users/me/WORK", "/Users/me/work", False, True),
    ("/Users/me/work/project", "/Users/me/work", True, True),
    ("/Users/me/workshop", "/Users/me/work", False, False),
    ("/Users/me", "/Users/me/work", False, False),
]


@pytest.mark.parametrize("path, root, on_linux, on_macos", POSIX_CASES)
def test_posix_paths_compare_with_case_on_linux_and_without_on_macos(path, root, on_linux, on_macos):
    assert is_inside(PurePosixPath(path), [PurePosixPath(root)], platform="linux") is on_linux
    assert is_inside(PurePosixPath(path), [PurePosixPath(root)], platform="darwin") is on_macos


def test_on_macos_a_match_in_another_case_must_be_one_folder_where_both_exist(tmp_path):
    """macOS ignores case by default, but a volume may be formatted case-sensitive: there `/WORK` is not `/work`.
    (Linux's file system plays that volume here: two folders whose names differ in case only.)"""
    root, other = tmp_path / "work", tmp_path / "WORK"
    root.mkdir()
    assert is_inside(other / "project", [root], platform="darwin"), "WORK is not here: the platform's rule holds"
    other.mkdir()
    assert not is_inside(other / "project", [root], platform="darwin"), "two folders, told apart by identity"
    assert not is_inside(other, [root], platform="darwin")
    assert is_inside(root / "project", [root], platform="darwin")
    assert not is_inside(other / "project", [root], platform="linux")


# --- one rule for "inside a root", on generated paths ---------------------------------------------------------------

PLATFORMS = ["linux", "darwin", "win32"]
FOLDS = {"linux": False, "darwin": True, "win32": True}


@given(COMPONENTS, st.integers(0, 6), st.sampled_from(PLATFORMS))
def test_a_path_is_within_each_of_its_ancestors_and_itself(components, cut, platform):
    root = posix(components[: max(1, min(cut, len(components)))])
    assert within(posix(components), root, platform)
    assert within(posix(components), "/", platform)


@given(COMPONENTS, COMPONENTS, st.lists(st.booleans(), max_size=40), st.sampled_from(PLATFORMS))
def test_a_root_named_in_another_case_holds_the_path_only_where_case_is_ignored(below, above, flips, platform):
    root = posix(above)
    other = recased(root, flips)
    expected = other == root or FOLDS[platform]
    assert within(posix(above + below), other, platform) is expected
    assert within(recased(posix(above + below), flips), root, platform) is expected
    assert paths.folds_case(root, platform) is FOLDS[platform]


@given(COMPONENTS, COMPONENT, st.sampled_from(PLATFORMS))
def test_a_sibling_whose_name_starts_like_the_root_is_not_within(components, more, platform):
    root = posix(components)
    assert not within(root + more, root, platform)
    assert not within(posix(components[:-1]), root, platform)


@given(COMPONENTS, COMPONENTS, st.sampled_from(PLATFORMS))
def test_within_is_a_component_prefix_compared_as_the_platform_compares_names(path, root, platform):
    fold = (lambda c: c.lower()) if FOLDS[platform] else (lambda c: c)
    expected = [fold(c) for c in path[: len(root)]] == [fold(c) for c in root]
    assert within(posix(path), posix(root), platform) is expected


@given(
    st.sampled_from("cCdD"),
    COMPONENTS,
    COMPONENTS,
    st.lists(st.booleans(), max_size=40),
    st.lists(st.sampled_from("\\/"), max_size=40),
    st.sampled_from(PLATFORMS),
)
def test_windows_paths_ignore_case_and_slash_direction_wherever_they_are_compared(
    drive, above, below, flips, separators, platform
):
    """A root a supervisor on Windows declared is compared by Windows' rules on any host."""
    root = f"{drive}:\\" + "\\".join(above)
    path = f"{drive}:\\" + "\\".join(above + below)
    seps = iter(separators + ["\\"] * len(path))
    mixed = "".join(next(seps) if c == "\\" else c for c in recased(path, flips))
    assert paths.is_windows_path(root) and paths.folds_case(root, platform)
    assert within(mixed, root, platform)
    other_drive = {"c": "D", "d": "C"}[drive.lower()]
    assert not within(other_drive + mixed[1:], root, platform)


def test_one_folder_under_two_names_is_inside_by_identity(tmp_path):
    """What a case-insensitive file system does (macOS by default), done with a bind mount: the same folder under
    another name is inside; a sibling folder is not."""
    root, other_name, sibling = tmp_path / "work", tmp_path / "WORK", tmp_path / "elsewhere"
    for folder in (root, other_name, sibling, root / "project"):
        folder.mkdir()
    if subprocess.run(["mount", "--bind", str(root), str(other_name)], capture_output=True).returncode != 0:
        pytest.skip("bind mounts need root here; the identity rule cannot be shown without one")
    try:
        assert is_inside(other_name / "project", [root])
        assert not is_inside(sibling, [root])
        assert not is_inside(Path("/nonexistent/work/project"), [root])
    finally:
        subprocess.run(["umount", str(other_name)], check=True)


def test_a_hard_link_to_bridges_own_files_is_never_readable(work_root, settings, tmp_path):
    """A hard link inside a root is the same file as Bridge's secret key or database: refused like the original."""
    from jobs.core.errors import Refused
    from jobs.core.paths import resolve_readable

    data = tmp_path / "data"
    data.mkdir()
    settings.DATA_DIR = data
    secret = data / "secret_key"
    secret.write_text("do not read me")
    (work_root / "innocent.txt").hardlink_to(secret)
    (work_root / "fine.txt").write_text("readable")
    with pytest.raises(Refused, match="Bridge's own data"):
        resolve_readable(str(work_root / "innocent.txt"))
    assert resolve_readable(str(work_root / "fine.txt")) == work_root / "fine.txt"


def test_a_new_data_dir_and_its_files_are_private_to_this_user(tmp_path):
    data = tmp_path / "fresh-data"
    env = {**os.environ, "BRIDGE_DATA_DIR": str(data)}
    env.pop("DATABASE_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=REPO, env=env, check=True, timeout=120)
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    for name in ("secret_key", "bridge.sqlite3"):
        assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
    for extra in data.glob("bridge.sqlite3-*"):  # the WAL and shared-memory files, when SQLite left them
        assert stat.S_IMODE(extra.stat().st_mode) & 0o077 == 0, extra


@pytest.mark.parametrize("racers", [2, 5])
def test_processes_that_start_at_once_on_a_new_data_dir_all_read_one_whole_value(tmp_path, racers):
    """The first to make the secret key is still writing it while the others look: none reads it half-made, and all
    read the same value."""
    from bridge.data_dir import kept_value

    path = tmp_path / "secret_key"
    first_is_making, let_first_finish = threading.Event(), threading.Event()
    read_by_first: list[str] = []

    def slow_make() -> str:
        first_is_making.set()
        let_first_finish.wait(10)
        return "first"

    first = threading.Thread(target=lambda: read_by_first.append(kept_value(path, slow_make)))
    first.start()
    assert first_is_making.wait(10)
    read_by_others = [kept_value(path, lambda i=i: f"other-{i}") for i in range(racers - 1)]
    let_first_finish.set()
    first.join(10)
    assert read_by_others + read_by_first == ["other-0"] * racers, "every process reads the one value that won"
    assert path.read_text() == "other-0" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret_key"], "no half-made file is left behind"
