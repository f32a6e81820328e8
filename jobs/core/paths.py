"""Confinement: a task's working directory must resolve (symlinks included) inside an allowed root."""

import os
import re
from collections.abc import Sequence
from pathlib import Path, PurePath, PurePosixPath, PureWindowsPath

from django.conf import settings

from jobs.core.errors import InvalidInput, NotFound, Refused
from jobs.core.inputs import check_path_text
from jobs.processes import PLATFORM

_WINDOWS_FORM = re.compile(r"^(?:[A-Za-z]:|\\\\)")  # a drive letter, or a UNC path's two backslashes


def allowed_roots() -> list[Path]:
    return [root.resolve() for root in settings.BRIDGE_ALLOWED_ROOTS]


def is_inside(path: PurePath, roots: Sequence[PurePath], platform: str = PLATFORM) -> bool:
    """Whether `path` is a root or lies below one, by the file system's own rules.

    Paths compare by their text first, as `within` does (without case where the file system ignores case); where
    they match only without case and both folders exist here, they must be one folder (a case-sensitive volume on
    macOS keeps `/Work` and `/work` apart). Then, for folders that exist, by identity: a folder reached under another
    name (a bind mount, a case-insensitive file system where this platform compares case) is inside when the device
    and inode numbers say so."""
    if any(within(path, root, platform) and _one_folder_here(path, root, platform) for root in roots):
        return True
    root_ids = {_identity(root) for root in roots} - {None}
    return bool(root_ids) and any(_identity(folder) in root_ids for folder in (path, *path.parents))


def _one_folder_here(path: PurePath, root: PurePath, platform: str) -> bool:
    """For a `path` within `root`: whether its ancestor at the root's depth is the root itself, when both exist on
    this host and their names differ (in case only); a path this host cannot look up keeps the platform's rule."""
    flavour = PureWindowsPath if is_windows_path(str(root), platform) else PurePosixPath
    root_parts = flavour(str(root)).parts
    ancestor = flavour(*flavour(str(path)).parts[: len(root_parts)])
    if ancestor.parts == root_parts:
        return True
    found, wanted = _identity(ancestor), _identity(root)
    return found is None or wanted is None or found == wanted


def within(path: str | PurePath, root: str | PurePath, platform: str = PLATFORM) -> bool:
    """Whether `path` is `root` or lies below it, by their text (already resolved: `..` is not followed). The one
    rule for every such question, whoever asks (confinement, a supervisor's claim, a wait reason): components are
    compared whole (`/work` does not hold `/workshop`), and without case where the file system ignores case
    (`folds_case`)."""
    windows = is_windows_path(str(root), platform)
    fold = folds_case(str(root), platform)
    path_parts, root_parts = _parts(str(path), windows, fold), _parts(str(root), windows, fold)
    return path_parts[: len(root_parts)] == root_parts


def is_windows_path(text: str, platform: str = PLATFORM) -> bool:
    """A path in Windows' form: any path on Windows, and elsewhere one with a drive letter or only backslashes (a root
    a supervisor on Windows declared, read on another host)."""
    return platform == "win32" or bool(_WINDOWS_FORM.match(text)) or ("\\" in text and "/" not in text)


def folds_case(text: str, platform: str = PLATFORM) -> bool:
    """Whether the file system a path like `text` lives on ignores case: Windows' always, and every path on macOS
    (APFS and HFS+ are case-insensitive unless formatted otherwise); Linux file systems do not."""
    return is_windows_path(text, platform) or platform == "darwin"


def _parts(text: str, windows: bool, fold: bool) -> tuple[str, ...]:
    parts = (PureWindowsPath(text) if windows else PurePosixPath(text)).parts
    return tuple(part.lower() for part in parts) if fold else parts


def _identity(path: PurePath) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except (OSError, ValueError):
        return None
    return stat.st_dev, stat.st_ino


def resolve_cwd(raw: str | None, roots: list[Path] | None = None, where: str = "") -> Path:
    """The real directory a task may run in (BRIDGE_DEFAULT_CWD when none is named), by `resolve_dir`."""
    if raw is None or not str(raw).strip():
        return resolve_dir(str(settings.BRIDGE_DEFAULT_CWD), "cwd", roots=roots, where=where)
    return resolve_dir(raw, "cwd", roots=roots, where=where)


def resolve_dir(raw: object, field: str, label: str = "", roots: list[Path] | None = None, where: str = "") -> Path:
    """The real directory `raw` names, or raise before anything starts: the one confinement rule for every directory
    a task uses (its cwd, Claude's `add_dirs`), checked when a task is made, when a supervisor claims it (against its
    own roots, `where` naming its host) and at spawn. An absolute path (~ expanded), every symlink followed, inside
    `roots` (by default this process's allowed roots), an existing directory; refusals name `label` (default
    `field`)."""
    label = label or field
    text = check_path_text(field, raw).strip()
    candidate = expanded(field, text)
    if not candidate.is_absolute():
        raise InvalidInput(f"{label} must be an absolute path, got {text!r}", field=field)
    roots = allowed_roots() if roots is None else roots
    resolved = resolved_or_refused(field, candidate, where)
    if not is_inside(resolved, roots):
        raise Refused(
            f"{label} {str(candidate)!r} resolves to {str(resolved)!r}{where}, outside the allowed roots: "
            + ", ".join(str(r) for r in roots)
            + " (set BRIDGE_ALLOWED_ROOTS to change them)",
            field=field,
            allowed_roots=[str(r) for r in roots],
        )
    if not resolved.exists():
        raise InvalidInput(f"{label} {str(resolved)!r} does not exist{where}", field=field)
    if not resolved.is_dir():
        raise InvalidInput(f"{label} {str(resolved)!r} is not a directory{where}", field=field)
    return resolved


def confine_task_dirs(cwd: str, add_dirs: list[str], roots: list[Path] | None = None, where: str = "") -> Path:
    """A task's cwd, resolved, once it and every added directory are confined again (`resolve_dir`): where a
    supervisor claims the task, and as its agent starts."""
    for added in add_dirs:
        resolve_dir(added, "add_dirs", "add_dirs entry", roots, where)
    return resolve_dir(cwd, "cwd", roots=roots, where=where)


def expanded(name: str, text: str) -> Path:
    """The path with a leading ~ or ~user expanded; naming a user this machine does not have is the caller's error."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        raise InvalidInput(f"{name} {text!r} starts with a home directory this machine does not know") from None


def resolved_or_refused(name: str, candidate: Path, where: str = "") -> Path:
    """The path with every symlink followed; a path the OS cannot even look up is the caller's error, not ours."""
    try:
        return candidate.resolve()
    except (OSError, RuntimeError) as exc:
        reason = getattr(exc, "strerror", exc)
        raise InvalidInput(f"{name} {str(candidate)!r} cannot be looked up{where}: {reason}") from None


def readable_roots() -> list[Path]:
    """Where hermes_read may look: the allowed roots plus BRIDGE_READ_ROOTS."""
    return allowed_roots() + [root.resolve() for root in settings.BRIDGE_READ_ROOTS]


def resolve_readable(raw: str, worktrees: Sequence[Path] = ()) -> Path:
    """Return the real path a planner may read, or raise: inside the readable roots unless BRIDGE_READ_ANYWHERE, or
    inside one of `worktrees` (the live worktrees of isolated tasks, which live in Bridge's data dir)."""
    candidate = expanded("path", check_path_text("path", raw or "").strip())
    if not str(raw or "").strip() or not candidate.is_absolute():
        raise InvalidInput(f"path must be an absolute path, got {raw!r}")
    resolved = resolved_or_refused("path", candidate)
    if is_inside(resolved, list(worktrees)):
        if not resolved.exists():
            raise NotFound(f"path {str(resolved)!r} does not exist")
        return resolved
    roots = readable_roots()
    if not settings.BRIDGE_READ_ANYWHERE and not is_inside(resolved, roots):
        raise Refused(
            f"path {str(candidate)!r} resolves to {str(resolved)!r}, outside the readable roots: "
            + ", ".join(str(r) for r in roots)
            + " (BRIDGE_ALLOWED_ROOTS and BRIDGE_READ_ROOTS; BRIDGE_READ_ANYWHERE=1 lifts this)",
            readable_roots=[str(r) for r in roots],
        )
    if is_bridge_private(resolved):
        raise Refused(f"path {str(resolved)!r} is Bridge's own data (its database and secret key): never readable")
    if not resolved.exists():
        raise NotFound(f"path {str(resolved)!r} does not exist")
    return resolved


def is_bridge_private(path: Path) -> bool:
    """Bridge's data dir (database, secret key, logs), whatever the roots say — except allowed roots inside it
    (the default work root lives there). A hard link to one of Bridge's own files is that file, wherever it is."""
    data_dir = Path(settings.DATA_DIR).resolve()
    if is_inside(path, [data_dir]) and not is_inside(path, [r for r in allowed_roots() if r != data_dir]):
        return True
    return _identity(path) in _own_file_identities(data_dir)


def _own_file_identities(data_dir: Path) -> set[tuple[int, int]]:
    """The (device, inode) of every file Bridge keeps directly in its data dir (database, secret key, logs…)."""
    try:
        entries = list(os.scandir(data_dir))
    except OSError:
        return set()
    identities = set()
    for entry in entries:
        if entry.is_file(follow_symlinks=False):
            identity = _identity(Path(entry.path))
            if identity is not None:
                identities.add(identity)
    return identities
