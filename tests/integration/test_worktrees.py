"""A task's own git worktree (jobs/workspace/worktrees.py), on real repositories: made from HEAD or a base, merged or
squashed onto the base branch, discarded; and the user's checkout never touched except by a merge that lands."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.workspace import worktrees
from jobs.workspace.worktrees import Worktree, WorktreeError

AUTHOR = "Task Agent <agent@example.com>"


@pytest.fixture(autouse=True)
def machine_without_git_identity(tmp_path_factory, monkeypatch) -> None:
    """No global or system git config leaks in, and git may not guess who commits (as on a CI machine)."""
    config = tmp_path_factory.mktemp("git-config") / "gitconfig"
    config.write_text("[user]\n\tuseConfigOnly = true\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_OPTIONAL_LOCKS", "0")  # the tests' own `git status` must not refresh the index
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)


def git(cwd: Path | str, *args: str) -> str:
    """The tests' own git, as the user would run it (their identity given here, not by the code under test)."""
    identity = ("-c", "user.name=The User", "-c", "user.email=user@example.com")
    done = subprocess.run(["git", *identity, *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    for name, text in (files or {"a.txt": "a\n", "src/deep/b.txt": "b\n", ".gitignore": "*.log\n"}).items():
        write(path / name, text)
    git(path, "add", "--all")
    git(path, "commit", "--quiet", "-m", "first")
    return path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def files_of(top: Path) -> dict[str, bytes]:
    return {
        path.relative_to(top).as_posix(): path.read_bytes()
        for path in sorted(top.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(top).parts
    }


def checkout_state(repo: Path) -> dict:
    """Everything of the user's checkout a worktree must leave alone, byte for byte."""
    return {
        "HEAD": (repo / ".git" / "HEAD").read_bytes(),
        "head commit": git(repo, "rev-parse", "HEAD"),
        "index": (repo / ".git" / "index").read_bytes(),
        "config": (repo / ".git" / "config").read_bytes(),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored"),
        "files": files_of(repo),
    }


def branch_tip(repo: Path, branch: str) -> str:
    return git(repo, "rev-parse", f"refs/heads/{branch}")


def bridge_branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/bridge/").split()


def parents(repo: Path, commit: str) -> list[str]:
    return git(repo, "rev-list", "--parents", "-n", "1", commit).split()[1:]


def error_code(call, *args, **kwargs) -> WorktreeError:
    with pytest.raises(WorktreeError) as raised:
        call(*args, **kwargs)
    return raised.value


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_repo(tmp_path / "project")


@pytest.fixture
def under(tmp_path) -> Path:
    return tmp_path / "bridge" / "worktrees"


@pytest.fixture
def dirty(repo) -> Path:
    return dirty_checkout(repo)


def dirty_checkout(repo: Path) -> Path:
    """The user's checkout mid-work: an unstaged edit, a staged one, an untracked and an ignored file."""
    write(repo / "a.txt", "a, being edited\n")
    write(repo / "src/deep/b.txt", "b, staged\n")
    git(repo, "add", "src/deep/b.txt")
    write(repo / "notes.txt", "untracked\n")
    write(repo / "debug.log", "ignored\n")
    return repo


# --- create ------------------------------------------------------------------------------------------------------


def test_a_worktree_from_head_holds_the_last_commit_on_its_own_branch_and_leaves_the_checkout_alone(dirty, under):
    before, refs_before = checkout_state(dirty), git(dirty, "for-each-ref", "--format=%(refname) %(objectname)")
    head = git(dirty, "rev-parse", "HEAD")

    wt = worktrees.create(dirty, under, "1a2b3c4d")

    assert checkout_state(dirty) == before
    refs_after = git(dirty, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    assert sorted(refs_after) == sorted([*refs_before.splitlines(), f"refs/heads/bridge/1a2b3c4d {head}"])
    assert (wt.branch, wt.base_branch, wt.base_commit, wt.relative_cwd) == ("bridge/1a2b3c4d", "main", head, "")
    assert Path(wt.repo) == dirty.resolve()
    assert Path(wt.path).parent.parent == under.resolve()
    assert Path(wt.path).parent.name.startswith("project-") and len(Path(wt.path).parent.name) == len("project-") + 8
    assert files_of(Path(wt.path)) == {"a.txt": b"a\n", "src/deep/b.txt": b"b\n", ".gitignore": b"*.log\n"}
    assert git(wt.path, "symbolic-ref", "HEAD") == "refs/heads/bridge/1a2b3c4d"
    assert worktrees.uncommitted(dirty) == ["a.txt", "notes.txt", "src/deep/b.txt"]


@pytest.mark.parametrize("kind", ["branch", "tag", "commit"])
def test_a_worktree_starts_from_the_base_given(repo, under, kind):
    first = git(repo, "rev-parse", "HEAD")
    git(repo, "tag", "v1")
    git(repo, "switch", "--quiet", "-c", "feature")
    write(repo / "a.txt", "feature\n")
    git(repo, "commit", "--quiet", "-am", "feature")
    feature = git(repo, "rev-parse", "HEAD")
    git(repo, "switch", "--quiet", "main")
    write(repo / "a.txt", "main moved on\n")
    git(repo, "commit", "--quiet", "-am", "main")
    base, commit, base_branch = {
        "branch": ("feature", feature, "feature"),
        "tag": ("v1", first, "main"),
        "commit": (first, first, "main"),
    }[kind]

    wt = worktrees.create(repo, under, "t1", base=base)

    assert (wt.base_commit, wt.base_branch) == (commit, base_branch)
    assert branch_tip(repo, wt.branch) == commit
    assert (Path(wt.path) / "a.txt").read_text() == git(repo, "show", f"{commit}:a.txt") + "\n"


def test_a_task_started_in_a_subdirectory_runs_in_the_same_subdirectory_of_its_worktree(repo, under):
    wt = worktrees.create(repo / "src" / "deep", under, "t1")

    assert wt.relative_cwd == "src/deep"
    assert wt.cwd() == Path(wt.path) / "src" / "deep"
    assert (wt.cwd() / "b.txt").read_text() == "b\n"


def test_a_subdirectory_git_does_not_track_is_made_in_the_worktree(repo, under):
    (repo / "empty" / "inner").mkdir(parents=True)

    wt = worktrees.create(repo / "empty" / "inner", under, "t1")

    assert wt.relative_cwd == "empty/inner"
    assert wt.cwd().is_dir()


def test_a_worktree_made_from_a_worktree_belongs_to_the_main_checkout(repo, under):
    first = worktrees.create(repo / "src", under, "t1")

    second = worktrees.create(first.cwd(), under, "t2")

    assert second.repo == first.repo == str(repo.resolve())
    assert Path(second.path).parent == Path(first.path).parent
    assert (second.base_branch, second.relative_cwd) == ("bridge/t1", "src")


def test_a_directory_outside_any_repository_is_refused(tmp_path, under):
    (tmp_path / "plain").mkdir()
    assert error_code(worktrees.create, tmp_path / "plain", under, "t1").code == "not_a_repository"
    assert error_code(worktrees.create, tmp_path / "missing", under, "t1").code == "not_a_repository"
    assert not under.exists()


def test_a_repository_without_commits_is_refused(tmp_path, under):
    (tmp_path / "new").mkdir()
    git(tmp_path / "new", "init", "--quiet")
    assert error_code(worktrees.create, tmp_path / "new", under, "t1").code == "no_commits"
    assert error_code(worktrees.create, tmp_path / "new", under, "t1", base="main").code == "no_commits"


@pytest.mark.parametrize("base", ["no-such-branch", "v9", "0" * 40, "-h", "HEAD~5"])
def test_a_base_that_names_no_commit_is_refused(repo, under, base):
    refs_before = git(repo, "for-each-ref")

    error = error_code(worktrees.create, repo, under, "t1", base=base)

    assert error.code == "bad_base"
    assert git(repo, "for-each-ref") == refs_before


def test_checking_a_base_refuses_what_create_would_and_makes_nothing(repo, tmp_path):
    (tmp_path / "plain").mkdir()
    refs_before = git(repo, "for-each-ref")

    worktrees.check_base(repo / "src", "")
    worktrees.check_base(repo, "main")

    assert error_code(worktrees.check_base, tmp_path / "plain").code == "not_a_repository"
    assert error_code(worktrees.check_base, repo, "no-such-branch").code == "bad_base"
    assert git(repo, "for-each-ref") == refs_before
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_a_task_name_whose_branch_exists_is_refused(repo, under):
    worktrees.create(repo, under, "t1")
    git(repo, "branch", "bridge/t2")

    assert error_code(worktrees.create, repo, under, "t1").code == "branch_exists"
    assert error_code(worktrees.create, repo, under, "t2").code == "branch_exists"
    assert len(git(repo, "worktree", "list", "--porcelain").split("\n\n")) == 2


@pytest.mark.parametrize("name", ["", "a/b", "a..b", "-x", "a b", "a~1"])
def test_a_name_that_cannot_be_a_branch_is_refused(repo, under, name):
    assert error_code(worktrees.create, repo, under, name).code == "bad_name"


def test_a_worktree_survives_its_json(repo, under):
    wt = worktrees.create(repo / "src", under, "t1")

    assert Worktree.from_json(json.loads(json.dumps(wt.as_json()))) == wt


def test_two_worktrees_of_one_repository_do_not_see_each_other(repo, under):
    one, two = worktrees.create(repo, under, "one"), worktrees.create(repo, under, "two")
    before = checkout_state(repo)

    write(Path(one.path) / "a.txt", "from one\n")
    write(Path(one.path) / "only-one.txt", "1\n")
    write(Path(two.path) / "a.txt", "from two\n")

    assert (Path(two.path) / "a.txt").read_text() == "from two\n"
    assert not (Path(two.path) / "only-one.txt").exists()
    assert (Path(one.path) / "a.txt").read_text() == "from one\n"
    assert worktrees.uncommitted(Path(one.path)) == ["a.txt", "only-one.txt"]
    assert worktrees.uncommitted(Path(two.path)) == ["a.txt"]
    assert checkout_state(repo) == before


# --- uncommitted -------------------------------------------------------------------------------------------------


def test_uncommitted_lists_staged_unstaged_and_untracked_files_but_not_ignored_ones(dirty):
    git(dirty, "mv", "src/deep/b.txt", "src/deep/moved.txt")
    write(dirty / "new dir" / "naïve file.txt", "x\n")

    assert worktrees.uncommitted(dirty / "src") == [
        "a.txt",
        "new dir/naïve file.txt",
        "notes.txt",
        "src/deep/b.txt",
        "src/deep/moved.txt",
    ]


def test_uncommitted_is_empty_for_a_clean_checkout_and_outside_any_repository(repo, tmp_path):
    assert worktrees.uncommitted(repo) == []
    assert worktrees.uncommitted(tmp_path / "bridge") == []
    (tmp_path / "plain").mkdir()
    assert worktrees.uncommitted(tmp_path / "plain") == []


# --- merge -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("strategy", "parent_count"), [("merge", 2), ("squash", 1)])
def test_merging_lands_the_task_s_work_on_the_checked_out_base_branch(repo, under, strategy, parent_count):
    wt = worktrees.create(repo, under, "t1")
    write(Path(wt.path) / "a.txt", "changed by the task\n")
    write(Path(wt.path) / "src" / "new.txt", "new\n")
    base = branch_tip(repo, "main")

    landed = worktrees.merge(wt, strategy, "Do the thing", AUTHOR)

    assert branch_tip(repo, "main") == landed
    assert parents(repo, landed)[0] == base and len(parents(repo, landed)) == parent_count
    work = branch_tip(repo, wt.branch)
    assert parents(repo, work) == [base]
    if strategy == "merge":  # (a squash onto a base that has not moved is the task's own commit)
        assert parents(repo, landed)[1] == work
    for commit in (landed, work):
        assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s", commit) == f"{AUTHOR}|{AUTHOR}|Do the thing"
    assert (repo / "a.txt").read_text() == "changed by the task\n"
    assert (repo / "src" / "new.txt").read_text() == "new\n"
    assert git(repo, "status", "--porcelain") == ""
    assert git(wt.path, "status", "--porcelain") == ""


def test_merging_uses_the_base_branch_as_it_is_now_not_as_it_was_at_create(repo, under):
    wt = worktrees.create(repo, under, "t1")
    write(repo / "later.txt", "the user went on\n")
    git(repo, "add", "later.txt")
    git(repo, "commit", "--quiet", "-m", "later")
    write(Path(wt.path) / "a.txt", "task\n")

    landed = worktrees.merge(wt, "squash", "task", AUTHOR)

    assert git(repo, "show", f"{landed}:later.txt") == "the user went on"
    assert git(repo, "show", f"{landed}:a.txt") == "task"


def test_a_merge_that_conflicts_changes_nothing_anywhere_and_names_the_file(repo, under):
    one, two = worktrees.create(repo, under, "one"), worktrees.create(repo, under, "two")
    write(Path(one.path) / "src/deep/b.txt", "b by one\n")
    write(Path(two.path) / "src/deep/b.txt", "b by two\n")
    write(Path(two.path) / "other.txt", "no conflict here\n")
    worktrees.merge(one, "merge", "one", AUTHOR)
    dirty = dirty_checkout(repo)
    before, main, task = checkout_state(dirty), branch_tip(dirty, "main"), branch_tip(dirty, two.branch)
    task_before = (files_of(Path(two.path)), git(two.path, "status", "--porcelain"))

    error = error_code(worktrees.merge, two, "merge", "two", AUTHOR)

    assert error.code == "conflict" and error.files == ["src/deep/b.txt"] and "src/deep/b.txt" in error.message
    assert checkout_state(dirty) == before
    assert (branch_tip(dirty, "main"), branch_tip(dirty, two.branch)) == (main, task)
    assert (files_of(Path(two.path)), git(two.path, "status", "--porcelain")) == task_before


@pytest.mark.parametrize("edit", ["tracked", "untracked"])
def test_a_merge_that_would_overwrite_local_changes_in_the_checkout_changes_nothing(repo, under, edit):
    wt = worktrees.create(repo, under, "t1")
    name = "a.txt" if edit == "tracked" else "new.txt"
    write(Path(wt.path) / name, "the task's version\n")
    write(repo / name, "the user's unsaved version\n")
    before, main, task = checkout_state(repo), branch_tip(repo, "main"), branch_tip(repo, wt.branch)

    error = error_code(worktrees.merge, wt, "squash", "task", AUTHOR)

    assert error.code == "checkout_not_clean" and error.files == [name]
    assert name in error.message and str(repo) in error.message
    assert checkout_state(repo) == before
    assert (branch_tip(repo, "main"), branch_tip(repo, wt.branch)) == (main, task)
    assert worktrees.uncommitted(Path(wt.path)) == [name]


def test_local_changes_the_merge_does_not_touch_stay_in_the_checkout(dirty, under):
    wt = worktrees.create(dirty, under, "t1")
    write(Path(wt.path) / "fresh.txt", "task\n")

    worktrees.merge(wt, "merge", "task", AUTHOR)

    assert (dirty / "fresh.txt").read_text() == "task\n"
    assert worktrees.uncommitted(dirty) == ["a.txt", "notes.txt", "src/deep/b.txt"]
    assert git(dirty, "diff", "--cached", "--name-only") == "src/deep/b.txt"


def test_a_base_branch_checked_out_nowhere_moves_without_touching_any_checkout(repo, under):
    git(repo, "branch", "release")
    wt = worktrees.create(repo, under, "t1", base="release")
    write(Path(wt.path) / "a.txt", "for release\n")
    before, main = checkout_state(repo), branch_tip(repo, "main")

    landed = worktrees.merge(wt, "merge", "release it", AUTHOR)

    assert branch_tip(repo, "release") == landed
    assert git(repo, "show", "release:a.txt") == "for release"
    assert checkout_state(repo) == before and branch_tip(repo, "main") == main
    assert "bridge: merge bridge/t1" in git(repo, "reflog", "show", "-1", "release")


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in git is a shell script")
@pytest.mark.parametrize("checked_out", [True, False])
def test_a_base_branch_that_moves_while_the_merge_runs_is_not_overwritten(
    repo, under, tmp_path, monkeypatch, checked_out
):
    if not checked_out:
        git(repo, "branch", "release")
    base = "main" if checked_out else "release"
    wt = worktrees.create(repo, under, "t1", base=base)
    write(Path(wt.path) / "a.txt", "work\n")
    tip = branch_tip(repo, base)
    racer = git(repo, "commit-tree", f"{tip}^{{tree}}", "-p", tip, "-m", "someone else's commit")
    racing_git = tmp_path / "racing-git" / "git"
    racing_git.parent.mkdir()
    racing_git.write_text(  # the real git, but someone commits to the base branch just as the merge is computed
        f'#!/bin/sh\ncase " $* " in *" merge-tree "*) "{shutil.which("git")}" -C "{repo}" update-ref '
        f'refs/heads/{base} {racer} ;; esac\nexec "{shutil.which("git")}" "$@"\n'
    )
    racing_git.chmod(0o755)
    monkeypatch.setenv("PATH", f"{racing_git.parent}{os.pathsep}{os.environ['PATH']}")
    task = branch_tip(repo, wt.branch)

    error = error_code(worktrees.merge, wt, "merge", "work", AUTHOR)

    assert error.code == "base_moved"
    assert (branch_tip(repo, base), branch_tip(repo, wt.branch)) == (racer, task)


def test_a_task_without_new_work_has_nothing_to_merge(repo, under):
    wt = worktrees.create(repo, under, "t1")

    assert error_code(worktrees.merge, wt, "merge", "nothing", AUTHOR).code == "nothing_to_merge"
    write(Path(wt.path) / "a.txt", "work\n")
    worktrees.merge(wt, "squash", "work", AUTHOR)
    assert error_code(worktrees.merge, wt, "merge", "again", AUTHOR).code == "nothing_to_merge"


def test_a_task_started_on_a_detached_head_has_no_branch_to_merge_into(repo, under):
    git(repo, "switch", "--quiet", "--detach")
    wt = worktrees.create(repo, under, "t1")
    write(Path(wt.path) / "a.txt", "work\n")

    assert wt.base_branch == ""
    assert error_code(worktrees.merge, wt, "merge", "work", AUTHOR).code == "no_base_branch"


def test_a_task_whose_directory_is_gone_merges_what_its_branch_holds(repo, under):
    wt = worktrees.create(repo, under, "t1")
    write(Path(wt.path) / "a.txt", "committed by the agent\n")
    git(wt.path, "commit", "--quiet", "-am", "agent's commit")
    shutil.rmtree(wt.path)

    landed = worktrees.merge(wt, "merge", "what is left", AUTHOR)

    assert git(repo, "show", f"{landed}:a.txt") == "committed by the agent"


@pytest.mark.skipif(sys.platform == "win32", reason="the stand-in git is a shell script")
def test_a_git_older_than_2_38_cannot_merge_and_says_which_it_is(repo, under, tmp_path, monkeypatch):
    wt = worktrees.create(repo, under, "t1")
    write(Path(wt.path) / "a.txt", "work\n")
    old_git = tmp_path / "old-git" / "git"
    old_git.parent.mkdir()
    real = shutil.which("git")
    old_git.write_text(  # answers `git [options] version` as git 2.37 would, and runs the real git for all else
        f'#!/bin/sh\nfor word; do last="$word"; done\n[ "$last" = version ] && echo "git version 2.37.9" && exit 0\n'
        f'exec "{real}" "$@"\n'
    )
    old_git.chmod(0o755)
    monkeypatch.setenv("PATH", str(old_git.parent))

    error = error_code(worktrees.merge, wt, "merge", "work", AUTHOR)

    assert error.code == "git_too_old" and "git version 2.37.9" in error.message and "2.38" in error.message
    assert branch_tip(repo, "main") == wt.base_commit


@pytest.mark.parametrize(("strategy", "author"), [("rebase", AUTHOR), ("merge", "nobody"), ("merge", "<x@y>")])
def test_a_merge_asked_in_words_it_does_not_know_is_refused(repo, under, strategy, author):
    wt = worktrees.create(repo, under, "t1")
    write(Path(wt.path) / "a.txt", "work\n")

    error = error_code(worktrees.merge, wt, strategy, "work", author)

    assert error.code == ("bad_strategy" if strategy == "rebase" else "bad_author")


CHANGES = st.sampled_from([None, "delete", "one\n", "two\n"])


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(CHANGES, CHANGES), min_size=1, max_size=5))
def test_two_tasks_conflict_exactly_on_the_files_both_changed_differently(tmp_path_factory, edits):
    root = Path(tempfile.mkdtemp(dir=tmp_path_factory.getbasetemp()))
    names = [f"f{i}.txt" for i in range(len(edits))]
    repo = make_repo(root / "project", {name: "original\n" for name in names})
    one, two = worktrees.create(repo, root / "under", "one"), worktrees.create(repo, root / "under", "two")
    for name, (first, second) in zip(names, edits, strict=True):
        for wt, change in ((one, first), (two, second)):
            if change == "delete":
                (Path(wt.path) / name).unlink()
            elif change is not None:
                write(Path(wt.path) / name, change)
    clashing = [name for name, (a, b) in zip(names, edits, strict=True) if None not in (a, b) and a != b]

    outcomes = [merge_or_code(one), merge_or_code(two)]

    assert outcomes[0] == ("landed" if any(a for a, _ in edits) else "nothing_to_merge")
    if clashing:
        assert outcomes[1] == ("conflict", clashing)
        return
    for name, (first, second) in zip(names, edits, strict=True):
        final = second if second is not None else first if first is not None else "original\n"
        assert ((repo / name).read_text() if (repo / name).exists() else "delete") == final


def merge_or_code(wt: Worktree) -> object:
    try:
        worktrees.merge(wt, "merge", "task", AUTHOR)
    except WorktreeError as error:
        return (error.code, error.files) if error.code == "conflict" else error.code
    return "landed"


# --- remove ------------------------------------------------------------------------------------------------------


def test_removing_deletes_the_worktree_and_its_unmerged_branch_and_can_be_repeated(dirty, under):
    wt = worktrees.create(dirty, under, "t1")
    write(Path(wt.path) / "a.txt", "unmerged work\n")
    write(Path(wt.path) / "build.log", "ignored\n")
    git(wt.path, "commit", "--quiet", "-am", "unmerged")
    write(Path(wt.path) / "scratch.txt", "untracked\n")
    before = checkout_state(dirty)

    worktrees.remove(wt)
    worktrees.remove(wt)

    assert not Path(wt.path).exists() and not Path(wt.path).parent.exists()
    assert bridge_branches(dirty) == []
    assert git(dirty, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert checkout_state(dirty) == before


def test_removing_a_worktree_whose_directory_is_gone_forgets_it(repo, under):
    gone, kept = worktrees.create(repo, under, "gone"), worktrees.create(repo, under, "kept")
    shutil.rmtree(gone.path)

    worktrees.remove(gone)

    assert bridge_branches(repo) == ["bridge/kept"]
    listed = git(repo, "worktree", "list", "--porcelain")
    assert gone.path not in listed and kept.path in listed
    assert Path(kept.path).is_dir()


def test_prune_forgets_worktrees_whose_directories_are_gone(repo, under):
    wt = worktrees.create(repo, under, "t1")
    shutil.rmtree(wt.path)

    worktrees.prune(repo)

    assert wt.path not in git(repo, "worktree", "list", "--porcelain")
    assert branch_tip(repo, wt.branch) == wt.base_commit
