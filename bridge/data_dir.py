"""Where Bridge keeps its data, checked before anything is written there: the data directory (made if missing,
proven writable) and the kept values in it (the secret key, the machine id, the doorbell's secret), and a SQLite
database file. Whatever Bridge cannot use stops the start-up with one message naming the setting, the path, the OS's
words and the fix (SystemExit, which shows it alone: no traceback, there is nothing more to know). bridge/settings.py
calls these; nothing here reads Django's settings.
"""

import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

# File systems of the kernel's own (Linux), where no file Bridge makes is kept: a cause the OS's words do not name.
PSEUDO_FILE_SYSTEMS = frozenset(
    {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "debugfs", "tracefs", "securityfs", "pstore", "bpf", "configfs"}
    | {"efivarfs", "fusectl", "binfmt_misc"}
)


def pseudo_file_system(path: Path) -> str:
    """'; it lies on a proc file system, which keeps no files' when `path` (or, if missing, the nearest folder above
    it) lies on one of PSEUDO_FILE_SYSTEMS, by Linux's mount table; else ''."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        device = next(p for p in (path, *path.parents) if p.exists()).stat().st_dev
    except OSError:
        return ""  # not Linux, or no /proc
    for line in mounts:
        mount, _, source = line.partition(" - ")  # "id parent MAJOR:MINOR root point … - TYPE source options"
        if mount.split()[2] == f"{os.major(device)}:{os.minor(device)}" and source.split()[0] in PSEUDO_FILE_SYSTEMS:
            return f"; it lies on a {source.split()[0]} file system, which keeps no files"
    return ""


def named_data_dir(path: Path) -> str:
    """The data dir as messages name it: the setting as set, or the default and the setting that moves it."""
    if os.environ.get("BRIDGE_DATA_DIR"):
        return f"BRIDGE_DATA_DIR={str(path)!r}"
    return f"the default data directory {str(path)!r} (BRIDGE_DATA_DIR is not set)"


def data_dir_unusable(path: Path, doing: str, exc: OSError) -> SystemExit:
    """The one message for a data dir Bridge cannot keep its files in: the setting, the path, the OS's words and the
    fix. The start-up stops with it, and SystemExit shows it alone (no traceback: there is nothing more to know)."""
    cause = (exc.strerror or str(exc)) + pseudo_file_system(path)
    return SystemExit(
        f"Bridge cannot keep its data in {named_data_dir(path)}: {doing}: {cause}. Set BRIDGE_DATA_DIR to a directory "
        "this user can write, on a disk (it is made if missing)"
    )


def check_writable(directory: Path) -> None:
    """Make a file in `directory` and remove it: a read-only mount, /proc or a directory that is really a file fails
    here, in the OS's words, even for root (whom file modes do not stop)."""
    fd, probe = tempfile.mkstemp(dir=directory, prefix=".writable-")
    os.close(fd)
    os.unlink(probe)


def make_data_dir(path: Path) -> None:
    """The data dir, made if missing and proven writable: one Bridge cannot use stops the start-up here, naming it,
    instead of in a traceback from the first file or database write."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:
        pass  # it is there and not a directory: check_writable says so in the OS's words ("Not a directory")
    except OSError as exc:
        raise data_dir_unusable(path, "cannot make it", exc) from None
    try:
        check_writable(path)
    except OSError as exc:
        raise data_dir_unusable(path, "cannot write in it", exc) from None


def owner_only(path: Path, mode: int) -> None:
    """Bridge's data is for this user only; a file or folder made before this rule is tightened too."""
    try:
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, mode))
        path.chmod(mode)
    except OSError:
        pass  # not ours to change (e.g. another user's data dir): Bridge still runs, as before


def kept_value(path: Path, make: Callable[[], str]) -> str:
    """A value made on first use and kept at `path`, readable by this user only (never shared with children).

    Processes that start at once on a new data dir (runbridge and an MCP server, or test workers) each write a whole
    value to a file of their own and link it into place: the first link wins, and everyone reads that, never a file
    that another process has created but not yet written. One this user cannot read or write stops the start-up,
    naming it."""
    try:
        if not path.exists():
            fd, made = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")  # mode 0600
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(make())
                try:
                    os.link(made, path)
                except FileExistsError:
                    pass  # another process was first: its value stands
            finally:
                os.unlink(made)
        return path.read_text().strip()
    except OSError as exc:
        raise data_dir_unusable(path.parent, f"cannot keep {str(path)!r}", exc) from None


# --- the database as messages name it; a SQLite file Bridge cannot use stops the start-up --------------------------
SQLITE_HEADER = b"SQLite format 3\x00"  # how every SQLite database file begins (an empty file is a new database)


def database_setting() -> str:
    """The setting that says where the database is."""
    return "DATABASE_URL" if os.environ.get("DATABASE_URL") else "BRIDGE_DATA_DIR"


def elsewhere() -> str:
    """The fix every message about the database offers last."""
    setting = database_setting()
    return f"set {setting} to another " + ("data directory" if setting == "BRIDGE_DATA_DIR" else "database")


def is_sqlite(database: Mapping[str, object]) -> bool:
    return str(database["ENGINE"]).endswith("sqlite3")


def database_place(database: Mapping[str, object], data_dir: Path) -> str:
    """The database as messages name it: its file, or its name and server, and the setting that says so (never a
    password)."""
    if database_setting() == "BRIDGE_DATA_DIR":
        return f"the database {str(database['NAME'])!r}, in {named_data_dir(data_dir)}"
    if is_sqlite(database):
        return f"the database {str(database['NAME'])!r} (from DATABASE_URL)"
    server = str(database.get("HOST") or "localhost") + (f":{database['PORT']}" if database.get("PORT") else "")
    return f"the database {database['NAME']!r} on {server} (from DATABASE_URL)"


def check_sqlite_file(database: Mapping[str, object], data_dir: Path) -> None:
    """A SQLite database Bridge cannot use stops the start-up here, naming it (Django would fail at the first query,
    deep in a traceback): a folder SQLite cannot write its -wal and -shm files in, a file this user cannot write,
    or one that is not a database."""
    path, place = Path(str(database["NAME"])), database_place(database, data_dir)
    try:
        check_writable(path.parent)
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        opening = exc.filename == str(path)
        if opening and isinstance(exc, FileNotFoundError):
            return  # SQLite makes it
        cause = exc.strerror or str(exc)
        if opening:
            fix = f"Make it writable for this user, or {elsewhere()}"
            raise SystemExit(f"Bridge cannot use {place}: cannot open it for writing: {cause}. {fix}") from None
        fix = f"Make {str(path.parent)!r} a folder this user can write in, or {elsewhere()}"
        raise SystemExit(f"Bridge cannot use {place}: cannot write in its folder: {cause}. {fix}") from None
    with os.fdopen(fd, "rb") as opened:
        header = opened.read(len(SQLITE_HEADER))
    if header and header != SQLITE_HEADER:
        raise SystemExit(
            f"Bridge cannot use {place}: file is not a database (it does not begin as a SQLite database does). Rename "
            f"it to keep what it holds (`make run` then makes a new, empty database there), or {elsewhere()}"
        )
