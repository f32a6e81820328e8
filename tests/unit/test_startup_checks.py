"""bridge/data_dir.py's start-up checks on generated names and contents: a data dir Bridge cannot keep its files in,
or a SQLite file it cannot use, is one SystemExit naming the setting, the path, the cause and the fix. (The commands
that meet them are tests/integration/test_startup_failures.py.)"""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from bridge.data_dir import SQLITE_HEADER, check_sqlite_file, kept_value, make_data_dir
from bridge.settings import SQLITE_ENGINE

# A file or folder name: any character a path may hold but the separator and NUL (control characters and spaces too).
NAMES = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="/\x00"), min_size=1, max_size=16).filter(
    lambda name: name not in (".", "..")
)
TEMPORARY = hypothesis_settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=50)


def refusal(check, *args) -> str:
    with pytest.raises(SystemExit) as stopped:
        check(*args)
    return str(stopped.value)


@TEMPORARY
@given(name=NAMES)
def test_a_data_dir_inside_a_file_is_refused_naming_it(tmp_path, name):
    file = tmp_path / "a file"
    file.write_text("not a directory\n")
    message = refusal(make_data_dir, file / name)
    assert repr(str(file / name)) in message and "BRIDGE_DATA_DIR" in message, message
    assert "Not a directory" in message and "Set BRIDGE_DATA_DIR to a directory this user can write" in message


@TEMPORARY
@given(name=NAMES)
def test_a_data_dir_that_is_a_file_is_refused_naming_it(tmp_path, name):
    file = tmp_path / name
    file.write_text("not a directory\n")
    message = refusal(make_data_dir, file)
    assert repr(str(file)) in message and "cannot write in it: Not a directory" in message, message


@TEMPORARY
@given(name=NAMES)
def test_a_data_dir_under_proc_is_refused_saying_it_keeps_no_files(name):
    """Whatever the name (one of /proc's own, or new), /proc keeps no files: the message says so beside the OS's words,
    which ("No such file or directory", "Permission denied") would not. (A container may mount something else over
    a few of /proc's own names: those are not /proc.)"""
    path = Path("/proc") / name
    assume(not os.path.ismount(path))
    message = refusal(make_data_dir, path)
    assert repr(str(path)) in message and "it lies on a proc file system, which keeps no files" in message, message


@TEMPORARY
@given(content=st.binary(min_size=1, max_size=200).filter(lambda data: not data.startswith(SQLITE_HEADER)))
def test_a_file_that_is_not_a_database_is_refused_and_left_as_it_was(tmp_path, content):
    path = tmp_path / "bridge.sqlite3"
    path.write_bytes(content)
    message = refusal(check_sqlite_file, {"ENGINE": SQLITE_ENGINE, "NAME": str(path)}, path.parent)
    assert repr(str(path)) in message and "file is not a database" in message and "Rename it" in message, message
    assert path.read_bytes() == content


@TEMPORARY
@given(rest=st.binary(max_size=200))
def test_a_sqlite_file_or_an_empty_one_passes(tmp_path, rest):
    for content in (SQLITE_HEADER + rest, b""):
        path = tmp_path / "bridge.sqlite3"
        path.write_bytes(content)
        check_sqlite_file({"ENGINE": SQLITE_ENGINE, "NAME": str(path)}, path.parent)


def test_a_database_not_there_yet_passes(tmp_path):
    """SQLite makes it."""
    check_sqlite_file({"ENGINE": SQLITE_ENGINE, "NAME": str(tmp_path / "new.sqlite3")}, tmp_path)


def test_a_kept_value_that_cannot_be_read_is_refused_naming_it(tmp_path):
    """A secret key (or another value kept in the data dir) that is not a file stops the start-up, naming it."""
    kept = tmp_path / "secret_key"
    kept.mkdir()
    message = refusal(kept_value, kept, lambda: "made")
    assert repr(str(kept)) in message and "Is a directory" in message and "BRIDGE_DATA_DIR" in message, message
