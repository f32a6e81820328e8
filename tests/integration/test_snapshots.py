"""What a task changed in its working directory (jobs/workspace/snapshots.py), with real git and real files: generated
trees and edits are reported exactly (the expected changes computed from the edits, not from git), the user's
repository is left byte for byte as it was, the limits cut where they say, and what cannot be read gives a reason."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.workspace import git, snapshots
from jobs.workspace.snapshots import FileChange, Limits

LIMITS = Limits(max_files=5000, max_bytes=4 * 1024 * 1024)
GENERATED = hypothesis_settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
# Names git quotes in a patch header (a quote, a backslash, a tab) where the file system can hold them.
QUOTED = "" if sys.platform == "win32" else '"\\\t'
NAME = st.text(alphabet="abcxyz øж日-" + QUOTED, min_size=1, max_size=6).map(str.strip).filter(bool)
FOLDER = st.lists(NAME, max_size=2).map("/".join)
LINE_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\0"), max_size=12)
LITERAL = git.environment(GIT_LITERAL_PATHSPECS="1")  # a name is a name, not a pattern
needs_posix = pytest.mark.skipif(sys.platform == "win32", reason="symlinks and permissions as POSIX has them")


@dataclass
class Scenario:
    """A tree at the start, each file's fate, and the files the task adds. Every line and every binary file names
    its file and version, so no two files share content and git can pair only the renames the edits made."""

    start: dict[str, bytes]
    end: dict[str, bytes]
    expected: list[FileChange]
    tracked: dict[str, str] = field(default_factory=dict)  # path → "committed" | "staged" | "untracked"
    commit: bool = True
    cwd: str = ""

    def paths(self, state: str) -> list[str]:
        return [path for path, its in self.tracked.items() if its == state]


def lines_of(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def is_binary(path: str) -> bool:
    return path.endswith(".bin")


@st.composite
def contents(draw, path: str, version: int, allow_empty: bool = True) -> bytes:
    if is_binary(path):
        noise = draw(st.binary(max_size=24)).replace(b"\n", b"")
        return b"\0" + f"{path}.{version}".encode() + noise
    texts = draw(st.lists(LINE_TEXT, min_size=0 if allow_empty else 1, max_size=5))
    text = "".join(f"{path}.{version}.{number}:{line}\n" for number, line in enumerate(texts))
    if text and draw(st.booleans()):
        text = text[:-1]  # no newline at the end
    return text.encode()


@st.composite
def modified(draw, path: str, old: bytes) -> tuple[bytes, int, int]:
    """New content for `path` and the lines that edit adds and removes: appended lines, or a rewrite."""
    if is_binary(path):
        return draw(contents(path, 1)), 0, 0
    if (not old or old.endswith(b"\n")) and draw(st.booleans()):
        more = draw(contents(path, 1, allow_empty=False))
        more = more if more.endswith(b"\n") else more + b"\n"
        return old + more, lines_of(more), 0
    new = draw(contents(path, 1).filter(lambda data: data != old))
    return new, lines_of(new), lines_of(old)


@st.composite
def scenarios(draw, in_git: bool) -> Scenario:
    paths = draw(
        st.lists(st.tuples(FOLDER, NAME, st.sampled_from(["txt", "bin"])), max_size=8).map(
            lambda found: sorted({f"{folder}/{name}.{kind}".lstrip("/") for folder, name, kind in found})
        )
    )
    start = {path: draw(contents(path, 0)) for path in paths}
    end, expected = dict(start), []
    for number, path in enumerate(paths):
        fate = draw(st.sampled_from(["keep", "modify", "delete", "rename"] if start[path] else ["keep", "modify"]))
        if fate == "modify":
            end[path], added, removed = draw(modified(path, start[path]))
            expected.append(FileChange(path, "modified", added, removed, is_binary(path)))
        elif fate == "delete":
            del end[path]
            removed = 0 if is_binary(path) else lines_of(start[path])
            expected.append(FileChange(path, "deleted", 0, removed, is_binary(path)))
        elif fate == "rename":
            folder, _, name = path.rpartition("/")
            new_path = f"{folder}/moved {number} {name}".lstrip("/")
            end[new_path] = end.pop(path)
            expected += renamed(path, new_path, start[path], in_git)
    for number, folder in enumerate(draw(st.lists(FOLDER, max_size=3))):
        path = f"{folder}/new {number}.{draw(st.sampled_from(['txt', 'bin']))}".lstrip("/")
        end[path] = draw(contents(path, 2, allow_empty=False))
        expected.append(FileChange(path, "added", 0 if is_binary(path) else lines_of(end[path]), 0, is_binary(path)))
    return Scenario(start, end, sorted(expected, key=lambda change: change.path))


def renamed(old: str, new: str, data: bytes, in_git: bool) -> list[FileChange]:
    if in_git:
        return [FileChange(new, "renamed", 0, 0, is_binary(old), old_path=old)]
    lines = 0 if is_binary(old) else lines_of(data)
    return [FileChange(old, "deleted", 0, lines, is_binary(old)), FileChange(new, "added", lines, 0, is_binary(old))]


@st.composite
def git_scenarios(draw) -> Scenario:
    """A scenario in a repository: files committed, staged or untracked, maybe no commit at all, ignored files
    edited beside them (`*.ign`), and the task's cwd maybe a folder of the tree."""
    scenario = draw(scenarios(in_git=True))
    ignored = draw(st.lists(FOLDER, max_size=3))
    for number, folder in enumerate(ignored):
        path = f"{folder}/ignored {number}.ign".lstrip("/")
        scenario.start[path] = scenario.end[path] = b"left alone\n"
        fate = draw(st.sampled_from(["keep", "modify", "delete"]))
        if fate == "modify":
            scenario.end[path] = b"changed\n"
        elif fate == "delete":
            del scenario.end[path]
        scenario.end[f"{folder}/added {number}.ign".lstrip("/")] = b"new and ignored\n"
    states = st.sampled_from(["committed", "staged", "untracked"])
    scenario.tracked = {path: draw(states) for path in scenario.start if not path.endswith(".ign")}
    scenario.commit = draw(st.booleans())
    folders = sorted({path.rpartition("/")[0] for path in scenario.start if "/" in path})
    scenario.cwd = draw(st.sampled_from(["", *folders]))
    prefix = scenario.cwd + "/" if scenario.cwd else ""
    scenario.expected = [
        replace(change, path=change.path.removeprefix(prefix), old_path=change.old_path.removeprefix(prefix))
        for change in scenario.expected
        if change.path.startswith(prefix)
    ]
    return scenario


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)


def edit(root: Path, start: dict[str, bytes], end: dict[str, bytes]) -> None:
    """Make the tree at `root` go from `start` to `end` the way a task would: renames as renames."""
    gone = [path for path in start if path not in end]
    for path in gone:
        moved = next((new for new, data in end.items() if new not in start and data == start[path]), None)
        if moved is not None:
            os.rename(root / path, root / moved)
        else:
            (root / path).unlink()
    write_tree(root, {path: data for path, data in end.items() if start.get(path) != data})


def make_repository(root: Path, files: dict[str, bytes] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git.run(root, "init", "-q")
    for name, value in (("user.name", "t"), ("user.email", "t@example.com"), ("core.autocrlf", "false")):
        git.run(root, "config", name, value)
    write_tree(root, files or {})
    return root


def commit_all(root: Path) -> None:
    git.run(root, "add", "-A")
    git.run(root, "commit", "-q", "--no-gpg-sign", "-m", "start")


def repository_state(root: Path) -> dict[str, object]:
    """Everything of the user's repository that taking a snapshot must not change."""
    index = root / ".git" / "index"
    return {
        "index": index.read_bytes() if index.exists() else None,
        "HEAD": (root / ".git" / "HEAD").read_bytes(),
        "head commit": git.run(root, "rev-parse", "-q", "--verify", "HEAD", check=False).stdout,
        "refs": git.run(root, "for-each-ref").stdout,
        "status": git.run(root, "status", "--porcelain", "-z", "--untracked-files=all").stdout,
        "objects": sorted(str(path.relative_to(root)) for path in (root / ".git" / "objects").rglob("*")),
    }


def git_apply(root: Path, patch: str) -> None:
    subprocess.run(["git", "apply", "-p1"], cwd=root, input=patch.encode(), check=True, capture_output=True)


@given(data=st.data())
@GENERATED
def test_a_repository_reports_exactly_the_edits_and_is_left_untouched(tmp_path, data):
    """Generated files (text, binary, empty, unicode names with spaces) committed, staged or untracked, in a
    repository with or without commits, seen from its top or a folder: the changes are exactly the edits (renames as
    renames; ignored files and files outside the cwd never), and the index, HEAD, refs, status and object directory
    are byte-identical before and after each of take() and changes_since()."""
    scenario = data.draw(git_scenarios())
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        repo, store = make_repository(Path(scratch) / "repo", {".gitignore": b"*.ign\n"}), Path(scratch) / "store"
        write_tree(repo, scenario.start)
        git.run(repo, "add", "--", ".gitignore", *scenario.paths("committed"), env=LITERAL)
        if scenario.commit:
            git.run(repo, "commit", "-q", "--no-gpg-sign", "-m", "start")
        if staged := scenario.paths("staged"):  # an older version in the index than in the working tree
            write_tree(repo, {path: b"an older version\n" for path in staged})
            git.run(repo, "add", "--", *staged, env=LITERAL)
            write_tree(repo, {path: scenario.start[path] for path in staged})
        state = repository_state(repo)
        snapshot = snapshots.take(repo / scenario.cwd, store, "task", LIMITS)
        assert repository_state(repo) == state
        edit(repo, scenario.start, scenario.end)
        state = repository_state(repo)
        changes = snapshots.changes_since(snapshot, store, LIMITS)
        assert repository_state(repo) == state
    assert (snapshot.kind, changes.reason, changes.truncated, changes.left_out) == ("git", "", False, "")
    assert changes.files == scenario.expected


@given(data=st.data())
@GENERATED
def test_a_plain_directory_reports_exactly_the_edits_and_a_patch_that_replays_them(tmp_path, data):
    """Outside git, generated trees and edits: the changes are exactly the edits (a rename is a deletion and an
    addition), and the patch, applied by `git apply` to a copy of the start, turns every text file into its end."""
    scenario = data.draw(scenarios(in_git=False))
    with tempfile.TemporaryDirectory(dir=tmp_path) as scratch:
        work, replay, store = Path(scratch) / "work", Path(scratch) / "replay", Path(scratch) / "store"
        write_tree(work, scenario.start)
        work.mkdir(exist_ok=True)
        shutil.copytree(work, replay)
        snapshot = snapshots.take(work, store, "task", LIMITS)
        edit(work, scenario.start, scenario.end)
        changes = snapshots.changes_since(snapshot, store, LIMITS)
        if changes.patch:
            git_apply(replay, changes.patch)
        replayed = {str(p.relative_to(replay).as_posix()) for p in replay.rglob("*") if p.is_file()}
        text_now = {path for path in scenario.end if not is_binary(path)}
        assert {path for path in replayed if not is_binary(path)} == text_now
        assert all((replay / path).read_bytes() == scenario.end[path] for path in text_now)
    assert (snapshot.kind, changes.reason, changes.truncated, changes.left_out) == ("manifest", "", False, "")
    assert changes.files == scenario.expected


def test_a_repository_without_commits_reports_its_files(tmp_path):
    repo = make_repository(tmp_path / "repo", {"a.txt": b"one\n"})
    snapshot = snapshots.take(repo, tmp_path / "store", "task", LIMITS)
    write_tree(repo, {"a.txt": b"one\ntwo\n", "b.txt": b"new\n"})
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert snapshot.kind == "git"
    assert changes.files == [FileChange("a.txt", "modified", 1, 0, False), FileChange("b.txt", "added", 1, 0, False)]
    assert not (repo / ".git" / "index").exists()


def test_a_folder_of_a_repository_lists_only_its_files_relative_to_it(tmp_path):
    repo = make_repository(tmp_path / "repo", {"top.txt": b"top\n", "sub/in.txt": b"in\n", "subway.txt": b"no\n"})
    commit_all(repo)
    snapshot = snapshots.take(repo / "sub", tmp_path / "store", "task", LIMITS)
    write_tree(repo, {"top.txt": b"changed\n", "subway.txt": b"changed\n", "sub/in.txt": b"in\nmore\n"})
    write_tree(repo, {"sub/deeper/new.txt": b"new\n"})
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert changes.files == [
        FileChange("deeper/new.txt", "added", 1, 0, False),
        FileChange("in.txt", "modified", 1, 0, False),
    ]
    assert "diff --git a/in.txt b/in.txt" in changes.patch and "top.txt" not in changes.patch


def test_a_linked_worktree_is_snapshotted_with_its_own_index_and_the_shared_objects_untouched(tmp_path):
    repo = make_repository(tmp_path / "repo", {"a.txt": b"a\n"})
    commit_all(repo)
    git.run(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "linked"))
    linked = tmp_path / "linked"
    hour_ago = time.time() - 3600  # an index newer than the file: git trusts its stat cache and reads the blob it has
    os.utime(linked / "a.txt", (hour_ago, hour_ago))
    git.run(linked, "update-index", "-q", "--refresh")
    write_tree(linked, {"b.txt": b"untracked at the start\n"})
    objects = sorted((repo / ".git" / "objects").rglob("*"))
    snapshot = snapshots.take(linked, tmp_path / "store", "task", LIMITS)
    write_tree(linked, {"a.txt": b"a\nb\n", "b.txt": b"changed\n"})
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert changes.files == [FileChange("a.txt", "modified", 1, 0, False), FileChange("b.txt", "modified", 1, 1, False)]
    assert sorted((repo / ".git" / "objects").rglob("*")) == objects


@pytest.fixture(params=["git", "manifest"])
def kind(request) -> str:
    return request.param


def work_folder(root: Path, kind: str, files: dict[str, bytes]) -> Path:
    if kind == "git":
        commit_all(make_repository(root, files))
    else:
        write_tree(root, files)
        root.mkdir(exist_ok=True)
    return root


def test_past_max_files_the_list_stops_and_says_how_many_more(tmp_path, kind):
    work = work_folder(tmp_path / "work", kind, {"keep.txt": b"kept\n"})
    snapshot = snapshots.take(work, tmp_path / "store", "task", LIMITS)
    write_tree(work, {f"f{number}.txt": f"file {number}\n".encode() for number in range(5)})
    changes = snapshots.changes_since(snapshot, tmp_path / "store", Limits(max_files=3, max_bytes=LIMITS.max_bytes))
    assert [change.path for change in changes.files] == ["f0.txt", "f1.txt", "f2.txt"]
    assert (changes.truncated, changes.files_left_out) == (True, 2)
    assert changes.left_out == "2 more files past BRIDGE_CHANGES_MAX_FILES=3"
    assert changes.patch.count("diff --git") == 3 and "f3.txt" not in changes.patch


def test_past_max_bytes_the_patch_keeps_whole_files_that_fit_and_the_list_stays_whole(tmp_path, kind):
    """A file's patch is kept whole or not at all; one too big leaves the room to the smaller ones after it."""
    work = work_folder(tmp_path / "work", kind, {"keep.txt": b"kept\n"})
    snapshot = snapshots.take(work, tmp_path / "store", "task", LIMITS)
    sizes = {"f0.txt": 60, "f1.txt": 200, "f2.txt": 60, "f3.txt": 60}
    write_tree(work, {name: b"".join(b"line %d\n" % n for n in range(lines)) for name, lines in sizes.items()})
    whole = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS).patch
    parts = ["diff --git" + part for part in whole.split("diff --git")[1:]]
    max_bytes = len((parts[0] + parts[2]).encode()) + len(parts[3].encode()) // 2
    changes = snapshots.changes_since(snapshot, tmp_path / "store", Limits(max_files=10, max_bytes=max_bytes))
    assert changes.patch == parts[0] + parts[2]
    assert len(changes.files) == 4 and changes.truncated
    assert changes.left_out == f"the patch of 2 files past BRIDGE_CHANGES_MAX_BYTES={max_bytes}"


def test_a_working_directory_deleted_during_the_task_gives_a_reason(tmp_path, kind):
    work = work_folder(tmp_path / "work", kind, {"a.txt": b"a\n"})
    snapshot = snapshots.take(work, tmp_path / "store", "task", LIMITS)
    shutil.rmtree(work)
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert changes.reason == f"the working directory {work} no longer exists"
    assert (changes.files, changes.patch) == ([], "")


def test_forget_removes_what_was_kept(tmp_path, kind):
    work = work_folder(tmp_path / "work", kind, {"a.txt": b"a\n"})
    snapshot = snapshots.take(work, tmp_path / "store", "task", LIMITS)
    write_tree(work, {"a.txt": b"b\n"})
    snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert (tmp_path / "store" / "task").is_dir()
    snapshots.forget(snapshot, tmp_path / "store")
    snapshots.forget(snapshot, tmp_path / "store")
    assert list((tmp_path / "store").iterdir()) == []


def test_a_store_inside_the_working_directory_is_no_change(tmp_path, kind):
    work = work_folder(tmp_path / "work", kind, {"a.txt": b"a\n"})
    snapshot = snapshots.take(work, work / "store", "task", LIMITS)
    write_tree(work, {"a.txt": b"b\n"})
    changes = snapshots.changes_since(snapshot, work / "store", LIMITS)
    assert changes.files == [FileChange("a.txt", "modified", 1, 1, False)]


def test_outside_git_a_file_rewritten_to_the_same_size_and_mtime_is_modified(tmp_path):
    work = work_folder(tmp_path / "work", "manifest", {"a.txt": b"aaaa\n"})
    then = (work / "a.txt").stat()
    snapshot = snapshots.take(work, tmp_path / "store", "task", LIMITS)
    write_tree(work, {"a.txt": b"bbbb\n"})
    os.utime(work / "a.txt", ns=(then.st_atime_ns, then.st_mtime_ns))
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert changes.files == [FileChange("a.txt", "modified", 1, 1, False)]


@needs_posix
@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any directory")
def test_an_unreadable_working_directory_gives_a_reason(tmp_path):
    work = tmp_path / "work"
    work.mkdir(mode=0o000)
    try:
        snapshot = snapshots.take(work, tmp_path / "store", "task", LIMITS)
        changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    finally:
        work.chmod(0o755)
    assert (snapshot.kind, snapshot.reason) == (
        "none",
        f"the working directory {work} cannot be read: Permission denied",
    )
    assert changes.reason == snapshot.reason
    assert not (tmp_path / "store" / "task").exists()


def test_a_working_directory_that_is_a_file_gives_a_reason(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    snapshot = snapshots.take(tmp_path / "file", tmp_path / "store", "task", LIMITS)
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert snapshot.kind == "none" and "does not exist or is not a directory" in snapshot.reason
    assert (changes.kind, changes.reason, changes.files) == ("none", snapshot.reason, [])


def test_more_entries_than_a_manifest_holds_is_no_snapshot(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for number in range(snapshots.MANIFEST_MAX_ENTRIES + 1):  # hard links: entries without new files, faster
        if number % 1000 == 0:
            (source := work / f"{number}").touch()
        else:
            os.link(source, work / f"{number}")
    snapshot = snapshots.take(work, tmp_path / "store", "task", LIMITS)
    assert snapshot.kind == "none"
    assert "more than 100,000 files and folders" in snapshot.reason


def test_a_key_that_is_not_a_folder_name_is_no_snapshot(tmp_path):
    work = work_folder(tmp_path / "work", "manifest", {"a.txt": b"a\n"})
    snapshot = snapshots.take(work, tmp_path / "store" / "inner", "../escaped", LIMITS)
    assert snapshot.kind == "none" and "cannot name a folder" in snapshot.reason
    assert not (tmp_path / "store" / "escaped").exists()


def test_a_submodule_is_listed_without_a_patch_and_the_files_around_it_keep_theirs(tmp_path):
    inner = make_repository(tmp_path / "repo" / "inner", {"x.txt": b"x\n"})
    commit_all(inner)
    repo = make_repository(tmp_path / "repo", {"a.txt": b"a\n", "z.txt": b"z\n"})
    commit_all(repo)
    snapshot = snapshots.take(repo, tmp_path / "store", "task", LIMITS)
    write_tree(inner, {"x.txt": b"y\n"})
    commit_all(inner)
    write_tree(repo, {"a.txt": b"a\nb\n", "z.txt": b"z\nb\n"})
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert changes.files == [
        FileChange("a.txt", "modified", 1, 0, False),
        FileChange("inner", "modified", 0, 0, False),
        FileChange("z.txt", "modified", 1, 0, False),
    ]
    assert "Subproject" not in changes.patch
    assert "+++ b/a.txt" in changes.patch and "+++ b/z.txt" in changes.patch


@needs_posix
def test_a_file_that_becomes_a_symlink_is_modified_with_its_whole_patch(tmp_path, kind):
    """Git writes a change of type as a deletion and a creation: both stay with their file, and the next file's patch
    with it."""
    work = work_folder(tmp_path / "work", kind, {"a.txt": b"one\ntwo\n", "b.txt": b"b\n"})
    snapshot = snapshots.take(work, tmp_path / "store", "task", LIMITS)
    (work / "a.txt").unlink()
    (work / "a.txt").symlink_to("b.txt")
    write_tree(work, {"b.txt": b"b\nc\n"})
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert changes.files == [FileChange("a.txt", "modified", 1, 2, False), FileChange("b.txt", "modified", 1, 0, False)]
    assert changes.patch.count("diff --git a/a.txt b/a.txt") == 2 and "+++ b/b.txt" in changes.patch


def test_a_folder_the_repository_ignores_is_snapshotted_as_a_manifest(tmp_path):
    repo = make_repository(tmp_path / "repo", {".gitignore": b"build/\n", "build/out.txt": b"old\n"})
    commit_all(repo)
    snapshot = snapshots.take(repo / "build", tmp_path / "store", "task", LIMITS)
    write_tree(repo, {"build/out.txt": b"new\n"})
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert snapshot.kind == "manifest"
    assert changes.files == [FileChange("out.txt", "modified", 1, 1, False)]


def test_without_git_a_repository_is_snapshotted_as_a_manifest_without_its_git_folder(tmp_path, monkeypatch):
    repo = make_repository(tmp_path / "repo", {"a.txt": b"a\n"})
    commit_all(repo)
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    snapshot = snapshots.take(repo, tmp_path / "store", "task", LIMITS)
    write_tree(repo, {"a.txt": b"b\n", ".git/index": b"touched\n"})
    changes = snapshots.changes_since(snapshot, tmp_path / "store", LIMITS)
    assert snapshot.kind == "manifest"
    assert changes.files == [FileChange("a.txt", "modified", 1, 1, False)]


def test_a_snapshot_comes_back_from_json_with_keys_it_does_not_know(tmp_path):
    work = work_folder(tmp_path / "work", "git", {"a.txt": b"a\n"})
    snapshot = snapshots.take(work, tmp_path / "store", "task", LIMITS)
    again = snapshots.Snapshot.from_json({**snapshot.as_json(), "from_a_later_version": 1})
    write_tree(work, {"a.txt": b"b\n"})
    changes = snapshots.changes_since(again, tmp_path / "store", LIMITS)
    assert again == snapshot
    assert changes.as_json()["files"] == [
        {"path": "a.txt", "status": "modified", "added": 1, "removed": 1, "binary": False, "old_path": ""}
    ]
