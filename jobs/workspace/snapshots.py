"""What a task changed in its working directory: `take()` a snapshot when it starts, `changes_since()` it at the end,
`forget()` what was kept. Files and git only: the caller stores the `Snapshot` (as JSON), names the store directory
(one folder per snapshot key in it) and passes the limits.

In a git repository the snapshot is a tree object of the working state, written by `git add -A` on a copy of the
repository's index (so git's stat cache keeps it fast) into an object directory of Bridge's own that borrows the
repository's objects as alternates: the user's index, branch, refs, files and object database are never written.
Ignored files stay out. `git add -A` hashes every new untracked file, so a huge untracked file beside the task costs
the time to read it, at the start and at the end.

Outside git (no repository, no git installed, or a folder git ignores) the snapshot is a manifest: each file's size,
mtime and SHA-256 (up to 16 MiB), and a copy of each small text file so that the end can show a patch. Renames are not
detected there (a deleted file and an added one), `.git` folders are left out, and a folder of more than 100,000 files
and folders is not snapshotted at all.
"""

import codecs
import difflib
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import BinaryIO

from jobs.workspace import git

MANIFEST_MAX_ENTRIES = 100_000
HASH_MAX_BYTES = 16 * 1024 * 1024
COPY_MAX_BYTES = 256 * 1024
COPIES_MAX_BYTES = 64 * 1024 * 1024
SNIFF_BYTES = 8 * 1024

_STATUSES = {"A": "added", "D": "deleted", "M": "modified", "T": "modified", "R": "renamed"}
_GITLINK = "160000"
_SYMLINK, _EXECUTABLE, _REGULAR = 0o120000, 0o100755, 0o100644
# Settings for Bridge's own git runs: a split index or an fsmonitor would write beside the user's index or start a
# daemon in the user's repository.
_GIT_CONFIG = {"core.splitIndex": "false", "core.fsmonitor": "false"}
_C_ESCAPES = {"\a": "a", "\b": "b", "\t": "t", "\n": "n", "\v": "v", "\f": "f", "\r": "r", '"': '"', "\\": "\\"}


@dataclass(frozen=True)
class Limits:
    max_files: int  # files listed at most (BRIDGE_CHANGES_MAX_FILES)
    max_bytes: int  # unified patch kept at most, bytes of UTF-8 (BRIDGE_CHANGES_MAX_BYTES)


@dataclass(frozen=True)
class Snapshot:
    """What a directory held when a task started: enough to tell later what changed. Stored by the caller as JSON."""

    kind: str  # "git" | "manifest" | "none"
    cwd: str  # the directory snapshotted (resolved)
    key: str  # the caller's id for it: names what is kept in the store
    repo: str = ""  # git: the repository's top level
    tree: str = ""  # git: the id of the tree object of the working state at the start
    reason: str = ""  # "none": why no snapshot could be taken, in words for a person

    def as_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Snapshot":
        values = {field.name: str(data.get(field.name) or "") for field in fields(cls)}
        return cls(**{**values, "kind": values["kind"] or "none"})


@dataclass(frozen=True)
class FileChange:
    path: str  # relative to the snapshot's cwd, forward slashes
    status: str  # "added" | "modified" | "deleted" | "renamed"
    added: int  # lines added (0 for binary)
    removed: int  # lines removed (0 for binary)
    binary: bool
    old_path: str = ""  # renamed: where it was


@dataclass(frozen=True)
class Changes:
    kind: str  # the snapshot's kind
    base: str  # git: the start tree id; manifest: "manifest"; none: ""
    files: list[FileChange]  # sorted by path
    patch: str  # unified diff of the text files (git-style headers), at most max_bytes, cut at a file boundary
    truncated: bool
    left_out: str  # what truncation left out, in words; "" when nothing was
    reason: str = ""  # non-empty when nothing could be recorded: why
    files_left_out: int = 0  # how many changed files past max_files are not listed

    def as_json(self) -> dict:
        return asdict(self)


class _Unrecordable(Exception):
    """Why a snapshot cannot be taken, in words for a person."""


def take(cwd: Path, store: Path, key: str, limits: Limits) -> Snapshot:
    """What `cwd` holds now, kept under `store/<key>/` (replacing what was kept there before). Never raises: a
    snapshot that cannot be taken is kind "none" with the reason. `limits` bound what `changes_since` reports; taking a
    snapshot needs none of them."""
    try:
        folder = _folder(store, key)
    except _Unrecordable as exc:
        return Snapshot("none", str(cwd), key, reason=str(exc))
    try:
        return _snapshot(Path(cwd), folder, key)
    except Exception as exc:  # the promise is a snapshot, whatever git or the file system does
        shutil.rmtree(folder, ignore_errors=True)  # what was kept of a snapshot that is not one
        reason = str(exc) if isinstance(exc, _Unrecordable) else f"could not snapshot {cwd}: {exc}"
        return Snapshot("none", str(cwd), key, reason=reason)


def _snapshot(cwd: Path, folder: Path, key: str) -> Snapshot:
    where = _readable_directory(cwd)
    _remove(folder)
    folder.mkdir(parents=True)
    repository = _repository(where)
    if repository is not None:
        try:
            tree = _working_tree(where, folder, repository)
        except git.GitError:
            if not _ignored_by_git(where):  # git refuses a folder it ignores: a manifest sees its files
                raise
        else:
            (folder / "repository.json").write_text(json.dumps(asdict(repository), default=str), encoding="utf-8")
            return Snapshot("git", str(where), key, repo=str(repository.top), tree=tree)
    _write_manifest(where, folder)
    return Snapshot("manifest", str(where), key)


def changes_since(snapshot: Snapshot, store: Path, limits: Limits) -> Changes:
    """What changed in the snapshot's directory since it was taken, within `limits`. Never raises: when nothing can be
    told, `reason` says why."""
    base = {"git": snapshot.tree, "manifest": "manifest"}.get(snapshot.kind, "")
    if snapshot.kind not in ("git", "manifest"):
        return _nothing(snapshot.kind, base, snapshot.reason or "no snapshot was taken when the task started")
    if not Path(snapshot.cwd).is_dir():
        return _nothing(snapshot.kind, base, f"the working directory {snapshot.cwd} no longer exists")
    try:
        folder = _folder(store, snapshot.key)
        if snapshot.kind == "git":
            return _git_changes(snapshot, folder, limits)
        return _manifest_changes(snapshot, folder, limits)
    except Exception as exc:  # the promise is an answer, whatever git or the file system does
        return _nothing(snapshot.kind, base, f"could not tell what changed in {snapshot.cwd}: {exc}")


def forget(snapshot: Snapshot, store: Path) -> None:
    """Remove what `take()` and `changes_since()` kept in the store for this snapshot."""
    _remove(_folder(store, snapshot.key))


def _nothing(kind: str, base: str, reason: str) -> Changes:
    return Changes(kind, base, [], "", False, "", reason)


def _folder(store: Path, key: str) -> Path:
    if not key or key in (".", "..") or any(character in key for character in "/\\:\0"):
        raise _Unrecordable(f"the snapshot key {key!r} cannot name a folder in the store")
    return Path(store) / key


def _readable_directory(cwd: Path) -> Path:
    where = cwd.resolve()
    if not where.is_dir():
        raise _Unrecordable(f"the working directory {cwd} does not exist or is not a directory")
    try:
        with os.scandir(where):
            pass
    except OSError as exc:
        raise _Unrecordable(f"the working directory {cwd} cannot be read: {exc.strerror or exc}") from exc
    return where


def _remove(folder: Path) -> None:
    """Delete `folder` and everything in it, read-only files too (git writes its objects read-only)."""

    def writable_then_retry(function: Callable, path: str, *_: object) -> None:
        os.chmod(path, stat.S_IWRITE | stat.S_IREAD | stat.S_IEXEC)
        function(path)

    if not folder.exists():
        return
    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=writable_then_retry)
    else:
        shutil.rmtree(folder, onerror=writable_then_retry)


def _summary(
    kind: str,
    base: str,
    files: list[FileChange],
    patchable: set[str],
    patches: Callable[[set[str]], Iterable[str | None]],
    limits: Limits,
    notes: Iterable[str] = (),
) -> Changes:
    """The changes within `limits`: the first `max_files` files by path, and of the patches `patches(listed)` yields
    (one per listed patchable file; None for one known to be too big) those that fit in `max_bytes`."""
    ordered = sorted(files, key=lambda change: change.path)
    listed = ordered[: limits.max_files]
    names = {change.path for change in listed}
    patch, kept = _cut(patches(names), limits.max_bytes)
    left = []
    if len(ordered) > len(listed):
        left.append(
            f"{_count(len(ordered) - len(listed), 'more file')} past BRIDGE_CHANGES_MAX_FILES={limits.max_files}"
        )
    if kept < len(names & patchable):
        wanted = len(names & patchable)
        left.append(f"the patch of {_count(wanted - kept, 'file')} past BRIDGE_CHANGES_MAX_BYTES={limits.max_bytes}")
    return Changes(
        kind, base, listed, patch, bool(left), "; ".join([*left, *notes]), files_left_out=len(ordered) - len(listed)
    )


def _cut(patches: Iterable[str | None], max_bytes: int) -> tuple[str, int]:
    """The patches, in order, that fit in what `max_bytes` of UTF-8 has left when each comes (a file's patch whole or
    not at all: one too big to fit leaves room for smaller ones after it), and their count."""
    kept: list[str] = []
    room = max_bytes
    for patch in patches:
        size = room + 1 if patch is None else len(patch.encode())
        if size <= room:
            kept.append(patch or "")
            room -= size
    return "".join(kept), len(kept)


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}" + ("" if number == 1 else "s")


# Git: a tree of the working state at each end, written with a copy of the index into the store's object directory.


@dataclass(frozen=True)
class _Repository:
    top: Path
    objects: Path
    index: Path  # a linked worktree has an index of its own


def _repository(cwd: Path) -> _Repository | None:
    """The repository that holds `cwd` (as git.toplevel() finds it, with its object directory and index file in the
    same run of git), or None outside one or without git."""
    if git.executable() is None:
        return None
    done = git.run(cwd, "rev-parse", "--show-toplevel", "--git-path", "objects", "--git-path", "index", check=False)
    paths = done.stdout.splitlines()
    if done.returncode != 0 or len(paths) != 3:
        return None
    top, objects, index = ((cwd / path).resolve() for path in paths)
    return _Repository(top, objects, index)


def _working_tree(cwd: Path, folder: Path, repository: _Repository) -> str:
    """The id of a tree of `cwd`'s working state now (the rest of the repository as its index has it)."""
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        copy = Path(scratch) / "index"
        if repository.index.is_file():
            shutil.copy2(repository.index, copy)  # with its mtime: entries git must re-check stay so
        env = _git_environment(folder, repository.objects, copy)
        git.run(cwd, "add", "-A", "--", ".", *_excluded(cwd, folder.parent), env=env)
        return git.run(cwd, "write-tree", env=env).stdout.strip()


def _git_environment(folder: Path, objects: Path, index: Path | None = None) -> dict[str, str]:
    """New objects go to the store's object directory, reading the repository's too; no lazy fetch from a remote."""
    own = folder / "objects"
    own.mkdir(exist_ok=True)
    extra = {"GIT_OBJECT_DIRECTORY": str(own), "GIT_ALTERNATE_OBJECT_DIRECTORIES": _alternate(objects)}
    if index is not None:
        extra["GIT_INDEX_FILE"] = str(index)
    extra["GIT_CONFIG_COUNT"] = str(len(_GIT_CONFIG))
    for number, (name, value) in enumerate(_GIT_CONFIG.items()):
        extra[f"GIT_CONFIG_KEY_{number}"], extra[f"GIT_CONFIG_VALUE_{number}"] = name, value
    return git.environment(GIT_NO_LAZY_FETCH="1", **extra)


def _alternate(objects: Path) -> str:
    """`objects` as an entry of GIT_ALTERNATE_OBJECT_DIRECTORIES, quoted as git reads it when it holds the separator."""
    text = str(objects)
    if os.pathsep not in text and not text.startswith('"'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _excluded(cwd: Path, store: Path) -> list[str]:
    """A pathspec that keeps the store out of what git adds, when it is inside `cwd`."""
    try:
        inside = store.resolve().relative_to(cwd)
    except ValueError:
        return []
    return [f":(exclude,literal){inside.as_posix()}"]


def _ignored_by_git(cwd: Path) -> bool:
    """Whether `cwd` is in a folder the repository ignores (git would add none of its files)."""
    return git.run(cwd, "check-ignore", "-q", "--", ".", check=False).returncode == 0


@dataclass(frozen=True)
class _Record:
    change: FileChange
    parts: int  # the `diff --git` parts of its patch: 2 when the type changed (git shows a deletion and a creation)
    patchable: bool  # a text file's change (not binary, not a submodule)


def _git_changes(snapshot: Snapshot, folder: Path, limits: Limits) -> Changes:
    cwd = Path(snapshot.cwd)
    saved = json.loads((folder / "repository.json").read_text(encoding="utf-8"))
    repository = _Repository(Path(saved["top"]), Path(saved["objects"]), Path(saved["index"]))
    end = _working_tree(cwd, folder, repository)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        output = Path(scratch) / "diff"
        diff = ("diff-tree", "-r", "-M", "--relative", "--no-ext-diff", "--no-textconv", "--raw", "--numstat", "-p")
        env = _git_environment(folder, repository.objects)
        git.run(cwd, *diff, "-z", f"--output={output}", snapshot.tree, end, env=env)
        with output.open("rb") as stream:
            records = _records(_head(stream))
            patchable = {record.change.path for record in records if record.patchable}
            return _summary(
                "git",
                snapshot.tree,
                [record.change for record in records],
                patchable,
                lambda names: _git_patches(records, names, stream, limits.max_bytes),
                limits,
            )


def _head(stream: BinaryIO) -> str:
    """The raw and numstat records that open `diff-tree --raw --numstat -p -z`; `stream` is left where the patch starts
    (after the empty record that separates them)."""
    head = bytearray()
    while block := stream.read(1024 * 1024):
        start = max(0, len(head) - 1)
        head += block
        if (end := head.find(b"\0\0", start)) >= 0:
            stream.seek(end + 2)
            return head[:end].decode("utf-8", "replace")
    return head.rstrip(b"\0").decode("utf-8", "replace")


def _records(head: str) -> list[_Record]:
    """Each changed file from the -z raw records (modes, status, paths) and numstat records (line counts), which git
    writes in the same order."""
    tokens, at = head.split("\0"), 0
    raws = []
    while at < len(tokens) and tokens[at].startswith(":"):
        old_mode, new_mode, _, _, status = tokens[at][1:].split(" ")
        count = 2 if status[0] in "RC" else 1
        raws.append((old_mode, new_mode, status[0], tokens[at + 1 : at + 1 + count]))
        at += 1 + count
    counts = []
    while at < len(tokens) and tokens[at]:
        added, removed, path = tokens[at].split("\t", 2)
        counts.append((added, removed))
        at += 1 if path else 3
    return [_record(*raw, *count) for raw, count in zip(raws, counts, strict=True)]


def _record(old_mode: str, new_mode: str, status: str, paths: list[str], added: str, removed: str) -> _Record:
    gitlink, binary = _GITLINK in (old_mode, new_mode), added == "-"
    lines = (0, 0) if gitlink or binary else (int(added), int(removed))
    change = FileChange(
        path=paths[-1],
        status=_STATUSES.get(status, "modified"),
        added=lines[0],
        removed=lines[1],
        binary=binary and not gitlink,
        old_path=paths[0] if status == "R" else "",
    )
    return _Record(change, 2 if status == "T" else 1, not (gitlink or binary))


def _git_patches(records: list[_Record], names: set[str], stream: BinaryIO, cap: int) -> Iterator[str | None]:
    """The patch of each listed text file, in git's order (None: longer than `cap` bytes, not read into memory)."""
    parts = _parts(stream, cap)
    for record in records:
        taken = [next(parts, b"") for _ in range(record.parts)]
        if record.patchable and record.change.path in names:
            whole = [part for part in taken if part is not None]
            yield b"".join(whole).decode("utf-8", "replace") if len(whole) == len(taken) else None


def _parts(stream: BinaryIO, cap: int) -> Iterator[bytes | None]:
    """The patch cut before each `diff --git` line: each part's bytes, or None for a part longer than `cap` (read past
    without being kept). Lines are read at most `cap` + 1 bytes at a time, so a huge line is never held whole."""
    part: bytearray | None = None
    started, line_start = False, True
    while line := stream.readline(cap + 1):
        if line_start and line.startswith(b"diff --git "):
            if started:
                yield None if part is None else bytes(part)
            started, part = True, bytearray()
        if part is not None:
            part += line
            part = part if len(part) <= cap else None
        line_start = line.endswith(b"\n")
    if started:
        yield None if part is None else bytes(part)


# Outside git: a manifest of the files, and copies of the small text files to make patches from at the end.


@dataclass(frozen=True)
class _Entry:
    mode: int  # as git writes it: 100644, 100755 or 120000 (a symlink, whose content is its target)
    size: int
    mtime_ns: int
    sha256: str  # "" past HASH_MAX_BYTES
    binary: bool  # NUL in the first SNIFF_BYTES, or not UTF-8
    lines: int | None  # None: binary, or not read whole


def _write_manifest(top: Path, folder: Path) -> None:
    copies = _Copies(folder / "copies")
    entries, skipped = _survey(top, folder.parent, copies.keep)
    manifest = {"skipped": skipped, "entries": {name: asdict(entry) for name, entry in entries.items()}}
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


class _Copies:
    """The content-addressed copies of text files up to COPY_MAX_BYTES each, COPIES_MAX_BYTES in all."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.used = folder, 0
        folder.mkdir(exist_ok=True)

    def keep(self, entry: _Entry, data: bytes) -> None:
        if entry.binary or len(data) > COPY_MAX_BYTES or self.used + len(data) > COPIES_MAX_BYTES:
            return
        copy = self.folder / entry.sha256
        if not copy.exists():
            copy.write_bytes(data)
            self.used += len(data)

    def read(self, entry: _Entry) -> str | None:
        try:
            return (self.folder / entry.sha256).read_bytes().decode("utf-8") if entry.sha256 else None
        except (OSError, UnicodeDecodeError):
            return None


def _survey(
    top: Path, store: Path, keep: Callable[[_Entry, bytes], None] | None = None
) -> tuple[dict[str, _Entry], int]:
    """Every file under `top` (the store left out) by its relative path, and how many files and folders could not be
    read; `keep` sees the content of each file read whole."""
    found, skipped = _walk(top, store.resolve())
    entries: dict[str, _Entry] = {}
    for name, status in found.items():
        try:
            entry, data = _inspect(top / name, status)
        except OSError:
            skipped += 1
            continue
        entries[name] = entry
        if keep is not None and data is not None:
            keep(entry, data)
    return entries, skipped


def _walk(top: Path, store: Path) -> tuple[dict[str, os.stat_result], int]:
    """Every file and symlink under `top` (symlinks not followed; `.git` and the store left out) with its lstat, and
    how many entries could not be read. More than MANIFEST_MAX_ENTRIES files and folders: _Unrecordable."""
    found: dict[str, os.stat_result] = {}
    pending, seen, skipped = [""], 0, 0
    while pending:
        prefix = pending.pop()
        try:
            with os.scandir(top / prefix) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MANIFEST_MAX_ENTRIES:
                        raise _Unrecordable(
                            f"the working directory {top} holds more than {MANIFEST_MAX_ENTRIES:,} files and folders, "
                            "too many to snapshot outside a git repository"
                        )
                    if Path(entry.path) != store:
                        skipped += _note(entry, prefix + entry.name, found, pending)
        except OSError:
            if not prefix:
                raise
            skipped += 1
    return found, skipped


def _note(entry: os.DirEntry, name: str, found: dict[str, os.stat_result], pending: list[str]) -> int:
    """Add a file to `found` or a folder to `pending`; 1 when it could not be read, else 0."""
    try:
        if entry.is_dir(follow_symlinks=False):
            if entry.name != ".git":
                pending.append(name + "/")
        elif entry.name != ".git" and (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
            found[name] = entry.stat(follow_symlinks=False)
    except OSError:
        return 1
    return 0


def _inspect(path: Path, status: os.stat_result) -> tuple[_Entry, bytes | None]:
    """A file's entry, and its content when it was read whole (a symlink's content is its target)."""
    if stat.S_ISLNK(status.st_mode):
        data, mode = os.fsencode(os.readlink(path)), _SYMLINK
    else:
        with path.open("rb") as file:
            data = file.read(HASH_MAX_BYTES + 1 if status.st_size <= HASH_MAX_BYTES else SNIFF_BYTES)
        mode = _EXECUTABLE if status.st_mode & 0o111 else _REGULAR
    whole = status.st_size <= HASH_MAX_BYTES and len(data) <= HASH_MAX_BYTES
    binary = b"\0" in data[:SNIFF_BYTES] or not _is_utf8(data, final=whole)
    entry = _Entry(
        mode=mode,
        size=len(data) if whole else status.st_size,
        mtime_ns=status.st_mtime_ns,
        sha256=hashlib.sha256(data).hexdigest() if whole else "",
        binary=binary,
        lines=_line_count(data) if whole and not binary else None,
    )
    return entry, data if whole else None


def _is_utf8(data: bytes, final: bool) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=final)
    except UnicodeDecodeError:
        return False
    return True


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _differs(then: _Entry, now: _Entry) -> bool:
    if (then.mode, then.size) != (now.mode, now.size):
        return True
    if then.sha256 and now.sha256:
        return then.sha256 != now.sha256
    return then.mtime_ns != now.mtime_ns


def _manifest_changes(snapshot: Snapshot, folder: Path, limits: Limits) -> Changes:
    saved = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    then = {name: _Entry(**entry) for name, entry in saved["entries"].items()}
    now, skipped = _survey(Path(snapshot.cwd), folder.parent)
    comparison = _Comparison(Path(snapshot.cwd), _Copies(folder / "copies"), then, now)
    found = [comparison.change(name) for name in comparison.changed]
    files = [change for change, _ in found]
    patchable = {change.path for change, can in found if can}
    notes = []
    if unpatched := sum(1 for change, can in found if not can and not change.binary):
        notes.append(
            f"no patch for {_count(unpatched, 'changed text file')} too large to compare (a copy is kept of text files "
            f"up to {COPY_MAX_BYTES // 1024} KiB, {COPIES_MAX_BYTES // 1024 // 1024} MiB in all)"
        )
    if skipped := skipped + saved["skipped"]:
        notes.append(f"{_count(skipped, 'unreadable file or folder')} skipped")
    return _summary("manifest", "manifest", files, patchable, comparison.patches, limits, notes)


class _Comparison:
    """The manifest at the start beside the files now."""

    def __init__(self, top: Path, copies: _Copies, then: dict[str, _Entry], now: dict[str, _Entry]) -> None:
        self.top, self.copies, self.then, self.now = top, copies, then, now
        self.changed = sorted(
            name
            for name in then.keys() | now.keys()
            if name not in then or name not in now or _differs(then[name], now[name])
        )

    def change(self, name: str) -> tuple[FileChange, bool]:
        """The file's change, and whether a patch can be made of it."""
        before, after = self.then.get(name), self.now.get(name)
        status = "added" if before is None else "deleted" if after is None else "modified"
        binary = any(entry.binary for entry in (before, after) if entry is not None)
        texts = None if binary else self.texts(name)
        if texts is not None:
            added, removed = _line_changes(_split(texts[0]), _split(texts[1]))
        elif binary:
            added = removed = 0
        else:  # a text file without a copy: counted as rewritten
            added, removed = (after.lines or 0) if after else 0, (before.lines or 0) if before else 0
        return FileChange(_printable(name), status, added, removed, binary), texts is not None

    def texts(self, name: str) -> tuple[str, str] | None:
        """The file's text before and after ("" for a side where it does not exist), or None if one is not at hand."""
        before, after = self.then.get(name), self.now.get(name)
        old = "" if before is None else self.copies.read(before)
        new = None if old is None else "" if after is None else self.read(name, after)
        return None if old is None or new is None else (old, new)

    def read(self, name: str, entry: _Entry) -> str | None:
        path = self.top / name
        try:
            data = os.fsencode(os.readlink(path)) if entry.mode == _SYMLINK else path.read_bytes()
            return data.decode("utf-8") if entry.lines is not None and b"\0" not in data[:SNIFF_BYTES] else None
        except (OSError, UnicodeDecodeError):
            return None

    def patches(self, names: set[str]) -> Iterator[str | None]:
        for name in self.changed:
            if _printable(name) in names and (texts := self.texts(name)) is not None:
                yield _file_patch(_printable(name), self.then.get(name), self.now.get(name), *texts)


def _printable(name: str) -> str:
    """A file name as text that can be stored: bytes that were not UTF-8 become U+FFFD."""
    return name.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _split(text: str) -> list[str]:
    """Lines as git counts them: each with its newline, the last without one when the text does not end in one."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _line_changes(old: list[str], new: list[str]) -> tuple[int, int]:
    added = removed = 0
    for tag, old_start, old_end, new_start, new_end in difflib.SequenceMatcher(None, old, new).get_opcodes():
        if tag != "equal":
            added, removed = added + new_end - new_start, removed + old_end - old_start
    return added, removed


def _file_patch(name: str, before: _Entry | None, after: _Entry | None, old: str, new: str) -> str:
    """The file's part of a git-style patch (a change of type is a deletion and a creation, as git writes it)."""
    if before is not None and after is not None and (before.mode ^ after.mode) & 0o170000:
        return _file_patch(name, before, None, old, "") + _file_patch(name, None, after, "", new)
    head = f"diff --git {_quoted('a/' + name)} {_quoted('b/' + name)}\n"
    if before is None and after is not None:
        head += f"new file mode {after.mode:o}\n"
    elif after is None and before is not None:
        head += f"deleted file mode {before.mode:o}\n"
    elif before is not None and after is not None and before.mode != after.mode:
        head += f"old mode {before.mode:o}\nnew mode {after.mode:o}\n"
    hunks = "".join(_hunks(_split(old), _split(new)))
    if not hunks:
        return head
    source = "/dev/null" if before is None else _quoted("a/" + name)
    target = "/dev/null" if after is None else _quoted("b/" + name)
    return f"{head}--- {source}{_tab(source)}\n+++ {target}{_tab(target)}\n{hunks}"


def _hunks(old: list[str], new: list[str]) -> Iterator[str]:
    for group in difflib.SequenceMatcher(None, old, new).get_grouped_opcodes(3):
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, old_start, old_end, new_start, new_end in group:
            if tag == "equal":
                yield from _marked(" ", old[old_start:old_end])
            else:
                yield from _marked("-", old[old_start:old_end])
                yield from _marked("+", new[new_start:new_end])


def _range(start: int, end: int) -> str:
    if end - start == 1:
        return str(start + 1)
    return f"{start + 1 if end > start else start},{end - start}"


def _marked(sign: str, lines: list[str]) -> Iterator[str]:
    for line in lines:
        yield sign + line if line.endswith("\n") else f"{sign}{line}\n\\ No newline at end of file\n"


def _quoted(name: str) -> str:
    """A name as git writes it in a patch header: in C quotes when it holds a quote, a backslash or a control
    character, so that no name can end a header line or start another."""
    if not any(character in _C_ESCAPES or character < " " or character == "\x7f" for character in name):
        return name
    escaped = (
        "\\" + _C_ESCAPES[character]
        if character in _C_ESCAPES
        else f"\\{ord(character):03o}"
        if character < " " or character == "\x7f"
        else character
        for character in name
    )
    return '"' + "".join(escaped) + '"'


def _tab(label: str) -> str:
    """Git ends a ---/+++ line whose name holds a space with a tab, so that tools reading it know where it ends."""
    return "\t" if " " in label else ""
