"""A task's own git worktree: a branch `bridge/<name>` checked out in a directory Bridge owns, so an isolated agent
never writes in the user's checkout; later its work lands on the base branch (merged or squashed) or is discarded.

The user's checkout is touched only by a fast-forward that git itself refuses when it would overwrite local changes:
a merge is computed without any working tree (`git merge-tree --write-tree`), and a conflict changes nothing at all.
"""

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from functools import cache
from pathlib import Path

from jobs.workspace import git
from jobs.workspace.git import GitError

BRANCH_PREFIX = "bridge/"
STRATEGIES = ("merge", "squash")
MERGE_TREE_SINCE = (2, 38)  # `git merge-tree --write-tree`
_AUTHOR = re.compile(r"\s*([^<>]*?)\s*<([^<>]*)>\s*")
Keep = Callable[[], None]
_BLOCKED = ("would be overwritten by merge", "would be removed by merge")


@dataclass(frozen=True)
class Worktree:
    """Where a task's worktree is and what it will merge into; callers store `as_json()` and rebuild it later."""

    repo: str
    path: str
    branch: str
    base_branch: str
    base_commit: str
    relative_cwd: str

    def cwd(self) -> Path:
        """Where the agent runs: the requested cwd's place in the worktree."""
        return Path(self.path) / self.relative_cwd if self.relative_cwd else Path(self.path)

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Worktree":
        return cls(**{field.name: str(data[field.name]) for field in fields(cls)})


class WorktreeError(Exception):
    """Why a worktree could not be made, merged or removed; `code` is a stable word, `message` names the cause and the
    fix, `files` the conflicting or blocking paths when there are any."""

    def __init__(self, code: str, message: str, files: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.files = list(files)


@contextmanager
def _git_failures() -> Iterator[None]:
    """Git failing where it should not (a full disk, a broken repository) is a WorktreeError too, with git's words."""
    try:
        yield
    except GitError as exc:
        raise WorktreeError("git_failed", str(exc)) from exc


# --- create ------------------------------------------------------------------------------------------------------


def create(cwd: Path, under: Path, name: str, base: str = "") -> Worktree:
    """A new branch `bridge/<name>` at `base` (a branch, tag or commit; "" = HEAD) checked out in
    under/<repo dir>-<hash>/<name>. Only that branch and git's record of the worktree are added to the repository."""
    with _git_failures():
        top, prefix = _checkout_of(Path(cwd))
        repo = _checkouts(top)[0][0]
        branch = _new_branch(top, name)
        base_commit, base_branch = _resolve_base(top, base)
        path = Path(under).resolve() / f"{repo.name}-{_short_hash(str(repo))}" / name
        if path.exists():
            raise WorktreeError("path_exists", f"{path} already exists: remove it, or give the task another name")
        path.parent.mkdir(parents=True, exist_ok=True)
        git.run(top, "worktree", "add", "--quiet", "-b", branch, str(path), base_commit)
    worktree = Worktree(str(repo), str(path), branch, base_branch, base_commit, prefix.rstrip("/"))
    # The cwd may be a directory git does not track (empty, or untracked): the agent still starts there.
    worktree.cwd().mkdir(parents=True, exist_ok=True)
    return worktree


def check_base(cwd: Path, base: str = "") -> None:
    """Refuse now what create() would refuse about `cwd` and `base` (not a repository, no commits, an unknown base),
    making nothing: a task's worktree is planned when the task is created and made later, by the run."""
    with _git_failures():
        top, _prefix = _checkout_of(Path(cwd))
        _resolve_base(top, base)


def _checkout_of(cwd: Path) -> tuple[Path, str]:
    """The top of the working tree holding `cwd`, and `cwd` relative to it ("dir/sub/" or "")."""
    if git.executable() is None:
        raise WorktreeError("git_missing", "git is not installed (or not on PATH): install it, or run unisolated")
    if not cwd.is_dir():
        raise WorktreeError("not_a_repository", f"{cwd} is not a directory: give the task an existing directory")
    done = git.run(cwd, "rev-parse", "--show-toplevel", "--show-prefix", check=False)
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines:
        said = (done.stderr.strip().splitlines() or [""])[-1]
        raise WorktreeError(
            "not_a_repository",
            f"{cwd} is not inside a git working tree ({said}): run `git init` and commit there, "
            "or run the task without worktree isolation",
        )
    return Path(lines[0]).resolve(), lines[1] if len(lines) > 1 else ""


def _new_branch(top: Path, name: str) -> str:
    branch = BRANCH_PREFIX + name
    valid = name and not {"/", "\\"} & set(name) and not name.startswith("-")
    if not valid or git.run(top, "check-ref-format", f"refs/heads/{branch}", check=False).returncode != 0:
        raise WorktreeError("bad_name", f"{name!r} cannot name a branch: use letters, digits and '-' only")
    if _resolve(top, f"refs/heads/{branch}"):
        raise WorktreeError(
            "branch_exists",
            f"the branch {branch} already exists: delete it (git branch -D {branch}), or use another name",
        )
    return branch


def _resolve_base(top: Path, base: str) -> tuple[str, str]:
    """The commit to start from and the branch to merge into later (a named branch wins over a tag of its name)."""
    if base.startswith("-"):
        raise WorktreeError("bad_base", f"{base!r} is not a branch, tag or commit")
    if base:
        branch = base.removeprefix("refs/heads/")
        commit = _resolve(top, f"refs/heads/{branch}")
        if commit:
            return commit, branch
    commit = _resolve(top, base or "HEAD")
    if commit:
        return commit, _current_branch(top)
    if not _resolve(top, "HEAD") and not git.run(top, "for-each-ref", "--count=1").stdout.strip():
        raise WorktreeError("no_commits", f"the repository at {top} has no commits yet: commit once, then try again")
    if not base:
        raise WorktreeError("no_commits", f"HEAD in {top} has no commits yet: commit once, or give a base branch")
    raise WorktreeError("bad_base", f"{base!r} is not a branch, tag or commit in {top}: give one that exists")


def _current_branch(top: Path) -> str:
    done = git.run(top, "symbolic-ref", "--quiet", "HEAD", check=False)
    return done.stdout.strip().removeprefix("refs/heads/") if done.returncode == 0 else ""


def _resolve(directory: Path | str, revision: str) -> str:
    """The commit `revision` names, or "" when it names none."""
    done = git.run(directory, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}", check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _checkouts(directory: Path | str) -> list[tuple[Path, str]]:
    """Every working tree of the repository holding `directory`, the main one first: its top and the branch checked
    out there ("" when detached or bare)."""
    found = []
    for block in git.run(directory, "worktree", "list", "--porcelain").stdout.split("\n\n"):
        entry = dict(line.partition(" ")[::2] for line in block.splitlines() if line)
        if "worktree" in entry:
            found.append((Path(entry["worktree"]), entry.get("branch", "").removeprefix("refs/heads/")))
    return found


# --- uncommitted -------------------------------------------------------------------------------------------------


def uncommitted(cwd: Path) -> list[str]:
    """Paths with changes not committed (staged, unstaged, untracked and not ignored) in the checkout holding `cwd`,
    relative to its top and sorted: a new worktree starts from a commit, so these are not in it."""
    if git.executable() is None or not Path(cwd).is_dir():
        return []
    done = git.run(cwd, "status", "--porcelain=v1", "-z", "--untracked-files=all", check=False)
    if done.returncode != 0:
        return []
    paths, entries = set(), iter(done.stdout.split("\0"))
    for entry in entries:
        if len(entry) > 3:
            paths.add(entry[3:])
            if entry[0] in "RC":  # a rename or copy: its source follows as an entry of its own
                paths.add(next(entries, ""))
    return sorted(paths - {""})


# --- merge -------------------------------------------------------------------------------------------------------


def merge(wt: Worktree, strategy: str, message: str, author: str) -> str:
    """Commit whatever the worktree holds, then land the task's branch on its base branch as a merge (two parents) or
    a squash (one); the new commit of the base branch. Nothing changes anywhere when it cannot land."""
    if strategy not in STRATEGIES:
        raise WorktreeError("bad_strategy", f"{strategy!r} is not a way to merge: use one of {', '.join(STRATEGIES)}")
    if not wt.base_branch:
        raise WorktreeError(
            "no_base_branch",
            f"the task started on a detached HEAD, so it has no branch to merge into: merge {wt.branch} yourself",
        )
    identity = _identity(author)
    with _git_failures():
        _require_merge_tree()
        old = _resolve(wt.repo, f"refs/heads/{wt.base_branch}")
        tip = _resolve(wt.repo, f"refs/heads/{wt.branch}")
        if not old or not tip:
            gone = wt.base_branch if not old else wt.branch
            raise WorktreeError("no_base_branch", f"the branch {gone} no longer exists in {wt.repo}")
        with _work_committed(wt, tip, message, identity) as (work, keep_work):
            if _is_ancestor(wt.repo, work, old):
                raise WorktreeError("nothing_to_merge", f"{wt.branch} has nothing {wt.base_branch} does not have")
            tree = _merged_tree(wt, old, work)
            parents = (old, work) if strategy == "merge" else (old,)
            new = _commit_tree(wt.repo, tree, parents, message, identity)
            _land(wt, new, old)
            keep_work()
    return new


def _identity(author: str) -> dict[str, str]:
    """'Name <email>' as author and committer, so no commit depends on the machine's git config."""
    match = _AUTHOR.fullmatch(author)
    if not match or not match.group(1):
        raise WorktreeError("bad_author", f"{author!r} is not an author: write it as 'Name <email>'")
    name, email = match.groups()
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


def _require_merge_tree() -> None:
    said, version = _git_version(git.executable() or "git")
    if version < MERGE_TREE_SINCE:
        raise WorktreeError(
            "git_too_old",
            f"merging a task needs git {'.'.join(map(str, MERGE_TREE_SINCE))} or newer (for `git merge-tree "
            f"--write-tree`), and this is {said}: upgrade git, or merge the task's branch yourself",
        )


@cache
def _git_version(executable: str) -> tuple[str, tuple[int, int]]:
    """What `git version` says, and its major and minor numbers (asked once per executable)."""
    said = git.run(Path(executable).parent, "version").stdout.strip()
    found = re.search(r"(\d+)\.(\d+)", said)
    return said, (int(found.group(1)), int(found.group(2))) if found else (0, 0)


@contextmanager
def _work_committed(wt: Worktree, tip: str, message: str, identity: dict[str, str]) -> Iterator[tuple[str, Keep]]:
    """The worktree's files as a commit on top of the task's branch (`tip` when nothing changed), made in a copy of
    its index so that neither the branch nor the index moves unless the caller calls `keep()` once the work landed."""
    path = Path(wt.path)
    if not path.is_dir():  # the directory is gone: what the branch holds is all there is
        yield tip, lambda: None
        return
    index = Path(git.run(path, "rev-parse", "--path-format=absolute", "--git-path", "index").stdout.strip())
    handle, name = tempfile.mkstemp(prefix="bridge-index-", dir=index.parent)
    os.close(handle)
    copy = Path(name)
    try:
        _copy_or_start_empty(index, copy)
        staged = git.environment(GIT_INDEX_FILE=str(copy))
        git.run(path, "add", "--all", env=staged)
        tree = git.run(path, "write-tree", env=staged).stdout.strip()
        if tree == git.run(path, "rev-parse", f"{tip}^{{tree}}").stdout.strip():
            yield tip, lambda: None
            return
        work = _commit_tree(path, tree, (tip,), message, identity)

        def keep() -> None:
            # The work has landed by now: if the branch moved meanwhile, it keeps what it has rather than fail.
            ref = f"refs/heads/{wt.branch}"
            if (
                git.run(path, "update-ref", "-m", "bridge: the task's work", ref, work, tip, check=False).returncode
                == 0
            ):
                os.replace(copy, index)

        yield work, keep
    finally:
        copy.unlink(missing_ok=True)


def _copy_or_start_empty(index: Path, copy: Path) -> None:
    """A copy keeps git's record of unchanged files, so `add --all` reads only what changed."""
    if index.exists():
        shutil.copyfile(index, copy)
    else:
        copy.unlink()


def _is_ancestor(directory: Path | str, ancestor: str, descendant: str) -> bool:
    done = git.run(directory, "merge-base", "--is-ancestor", ancestor, descendant, check=False)
    if done.returncode > 1:
        raise GitError(f"git merge-base failed in {directory}: {done.stderr.strip()}")
    return done.returncode == 0


def _merged_tree(wt: Worktree, old: str, work: str) -> str:
    """The tree of `work` merged into `old`, computed in the object store alone; a conflict names its files."""
    done = git.run(wt.repo, "merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", old, work, check=False)
    if done.returncode > 1:
        raise GitError(f"git merge-tree failed in {wt.repo}: {done.stderr.strip()}")
    tree, *files = [part for part in done.stdout.split("\0") if part]
    if done.returncode == 1:
        raise WorktreeError(
            "conflict",
            f"the task's changes conflict with {wt.base_branch} in {', '.join(files) or 'some files'}; nothing was "
            f"changed: merge {wt.base_branch} into {wt.branch} in {wt.path}, settle the conflicts, then merge again",
            files,
        )
    return tree


def _commit_tree(directory: Path | str, tree: str, parents: Iterable[str], message: str, identity: dict) -> str:
    parent_args = [arg for parent in parents for arg in ("-p", parent)]
    done = git.run(
        directory, "commit-tree", "--no-gpg-sign", *parent_args, "-m", message, tree, env=git.environment(**identity)
    )
    return done.stdout.strip()


def _land(wt: Worktree, new: str, old: str) -> None:
    """Move the base branch from `old` to `new`: a fast-forward in the checkout that has it (git refuses when that
    would overwrite local changes), else a compare-and-swap of the ref."""
    holders = [top for top, branch in _checkouts(wt.repo) if branch == wt.base_branch and top.is_dir()]
    if not holders:
        ref = f"refs/heads/{wt.base_branch}"
        done = git.run(wt.repo, "update-ref", "-m", f"bridge: merge {wt.branch}", ref, new, old, check=False)
        if done.returncode != 0:
            raise _base_moved(wt)
        return
    done = git.run(
        holders[0], "merge", "--ff-only", "--quiet", "--no-autostash", "--no-verify-signatures", new, check=False
    )
    if done.returncode == 0:
        return
    if "Not possible to fast-forward" in done.stderr:
        raise _base_moved(wt)
    files = _blocking_files(done.stderr)
    why = f"its local changes to {', '.join(files)} would be overwritten" if files else _last_line(done.stderr)
    raise WorktreeError(
        "checkout_not_clean",
        f"{wt.base_branch} is checked out in {holders[0]}, and git would not move it there ({why}); nothing was "
        "changed: commit or stash those changes (or finish what is under way there), then merge again",
        files,
    )


def _base_moved(wt: Worktree) -> WorktreeError:
    return WorktreeError("base_moved", f"{wt.base_branch} moved while the task was merged into it: merge again")


def _blocking_files(stderr: str) -> list[str]:
    """The files git lists (tab-indented) under its 'would be overwritten by merge' errors."""
    files, listing = [], False
    for line in stderr.splitlines():
        if line.startswith("\t") and listing:
            files.append(line[1:])
        else:
            listing = any(words in line for words in _BLOCKED)
    return sorted(set(files))


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no message"


# --- remove ------------------------------------------------------------------------------------------------------


def remove(wt: Worktree) -> None:
    """Delete the worktree (whatever it holds) and its branch, merged or not; nothing to do when both are gone."""
    path = Path(wt.path)
    with _git_failures():
        if path.exists():
            git.run(wt.repo, "worktree", "remove", "--force", str(path))
        else:
            git.run(wt.repo, "worktree", "prune")
        if _resolve(wt.repo, f"refs/heads/{wt.branch}"):
            git.run(wt.repo, "branch", "--delete", "--force", wt.branch)
    try:
        path.parent.rmdir()  # the repository's folder under Bridge's, once its last worktree is gone
    except OSError:
        pass  # other tasks' worktrees are still in it, or it is gone already


def prune(repo: Path) -> None:
    """Forget worktrees whose directories are gone (git worktree prune)."""
    with _git_failures():
        git.run(repo, "worktree", "prune")
