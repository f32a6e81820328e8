"""Confinement by each platform's path rules: Windows drive letters and case, and folders a file system names in
more than one way."""

import subprocess
from pathlib import Path, PurePosixPath, PureWindowsPath

import pytest

from jobs.paths import is_inside

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
