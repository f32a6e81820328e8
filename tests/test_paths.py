"""Confinement by each platform's path rules: Windows drive letters and case, and folders a file system names in
more than one way."""

import os
import stat
import subprocess
import sys
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest

from jobs.paths import is_inside
from tests.support import REPO

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


@pytest.mark.parametrize("path, root, inside", WINDOWS_CASES)
def test_posix_paths_compare_with_case(path, root, inside):
    path, root = (PurePosixPath(p.replace("\\", "/")) for p in (path, root))
    assert is_inside(path, [root]) is (inside and str(path).startswith(str(root)))


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
    from jobs.errors import Refused
    from jobs.paths import resolve_readable

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
