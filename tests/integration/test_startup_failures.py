"""Start-up on a data dir or a database Bridge cannot use: every entry point (`make run`, runbridge, supervise, token,
mcp) stops with one message that names the setting, the path, the cause and the fix, a non-zero exit and no
traceback; `manage.py mcp` migrates a database that never was, and answers every tool with the one message while it
cannot. Each command runs for real, as a subprocess on a data dir of its own."""

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support import MANAGE_PY, REPO, TOOLS, skip_or_fail

pytestmark = pytest.mark.skipif(os.name != "posix", reason="read-only mounts and /proc are POSIX (Linux) things")

COMMANDS = {
    "make run": [sys.executable, "-m", "bridge.bootstrap", "run", "--port", "0"],
    "runbridge": [sys.executable, MANAGE_PY, "runbridge", "--port", "0"],
    "supervise": [sys.executable, MANAGE_PY, "supervise"],
    "token": [sys.executable, MANAGE_PY, "token", "list"],
    "mcp": [sys.executable, MANAGE_PY, "mcp"],
}
USE_THE_DATABASE = ["runbridge", "supervise", "token"]  # `make run` and `mcp` migrate a new database themselves
# A command that has not stopped by then has started despite the problem (runbridge, supervise and mcp serve on).
STOPS_WITHIN_S = 60
DATA_DIR_FIX = "Set BRIDGE_DATA_DIR to a directory this user can write"


def bridge_env(data_dir: Path, **more: str) -> dict[str, str]:
    """The environment of a Bridge on `data_dir` and its own SQLite database, with no agent CLI to look for."""
    env = {name: value for name, value in os.environ.items() if name != "DATABASE_URL"}
    env.update(
        BRIDGE_DATA_DIR=str(data_dir),
        BRIDGE_WEB_PROCESSES="1",
        BRIDGE_CLAUDE_BIN="no-such-claude",
        BRIDGE_HERMES_BIN="no-such-hermes",
    )
    return {**env, **more}


def start(command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            COMMANDS[command],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=STOPS_WITHIN_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`{command}` was still running after {STOPS_WITHIN_S} s, printing:\n{exc.stdout!r}{exc.stderr!r}")


def assert_one_message(result: subprocess.CompletedProcess, *words: str) -> str:
    """A non-zero exit, one line of output and no traceback, holding every one of `words`."""
    output = (result.stdout + result.stderr).strip()
    assert result.returncode != 0, f"exit code 0:\n{output}"
    assert "Traceback" not in output, output
    assert len(output.splitlines()) == 1, f"not one message:\n{output}"
    missing = [word for word in words if word not in output]
    assert not missing, f"{missing} missing from:\n{output}"
    return output


def mount(*args: str) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        skip_or_fail(f"`mount {' '.join(args)}` is not permitted here ({done.stderr.strip()}): it needs root")


def unmount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=True)


@pytest.fixture
def read_only_dir(tmp_path) -> Iterator[Path]:
    """An empty tmpfs mounted read-only: root cannot write in it either (file modes do not stop root)."""
    if shutil.which("mount") is None:
        skip_or_fail("no `mount` command")
    point = tmp_path / "read only"
    point.mkdir()
    mount("-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(point))
    yield point
    unmount(point)


@pytest.fixture
def read_only_database(tmp_path) -> Iterator[Path]:
    """A data dir whose SQLite database is bind-mounted read-only on itself: the folder is writable, the file not."""
    if shutil.which("mount") is None:
        skip_or_fail("no `mount` command")
    data = tmp_path / "data"
    data.mkdir()
    database = data / "bridge.sqlite3"
    sqlite3.connect(database).execute("CREATE TABLE kept (x)").connection.close()
    mount("--bind", str(database), str(database))
    try:
        mount("-o", "remount,bind,ro", str(database))
    except BaseException:
        unmount(database)
        raise
    yield data
    unmount(database)


def quoted(path: Path) -> str:
    return repr(str(path))


# --- an unusable data dir --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_a_data_dir_that_is_a_file_stops_the_start_up_with_one_message(tmp_path, command):
    data = tmp_path / "data"
    data.write_text("a file, not a directory\n")
    result = start(command, bridge_env(data))
    assert_one_message(result, f"BRIDGE_DATA_DIR={quoted(data)}", "Not a directory", DATA_DIR_FIX)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_data_dir_on_a_read_only_file_system_stops_the_start_up_with_one_message(read_only_dir, command):
    result = start(command, bridge_env(read_only_dir))
    assert_one_message(
        result, f"BRIDGE_DATA_DIR={quoted(read_only_dir)}", "cannot write in it: Read-only file system", DATA_DIR_FIX
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_a_data_dir_that_cannot_be_made_stops_the_start_up_with_one_message(read_only_dir, command):
    data = read_only_dir / "bridge"
    result = start(command, bridge_env(data))
    assert_one_message(result, f"BRIDGE_DATA_DIR={quoted(data)}", "cannot make it: Read-only file system", DATA_DIR_FIX)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_data_dir_under_proc_stops_the_start_up_with_one_message(command):
    data = Path("/proc") / f"bridge-{uuid.uuid4().hex[:8]}"
    result = start(command, bridge_env(data))
    assert_one_message(result, f"BRIDGE_DATA_DIR={quoted(data)}", "proc file system", DATA_DIR_FIX)


# --- a database file Bridge cannot use -------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_a_file_that_is_not_a_database_stops_the_start_up_with_one_message(tmp_path, command):
    data = tmp_path / "data"
    data.mkdir()
    database = data / "bridge.sqlite3"
    database.write_text("notes that were never a database\n")
    result = start(command, bridge_env(data))
    assert_one_message(
        result, quoted(database), f"BRIDGE_DATA_DIR={quoted(data)}", "file is not a database", "Rename it"
    )
    assert database.read_text() == "notes that were never a database\n", "the file is left as it was"


def test_a_database_url_naming_a_file_that_is_not_a_database_names_database_url(tmp_path):
    database = tmp_path / "elsewhere.sqlite3"
    database.write_bytes(b"\x00" * 100)
    env = bridge_env(tmp_path / "data", DATABASE_URL=f"sqlite:///{database}")
    assert_one_message(start("token", env), quoted(database), "DATABASE_URL", "file is not a database", "Rename it")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_database_file_that_cannot_be_written_stops_the_start_up_with_one_message(read_only_database, command):
    result = start(command, bridge_env(read_only_database))
    database = read_only_database / "bridge.sqlite3"
    assert_one_message(
        result,
        quoted(database),
        f"BRIDGE_DATA_DIR={quoted(read_only_database)}",
        "cannot open it for writing: Read-only file system",
        "Make it writable for this user, or set BRIDGE_DATA_DIR to another data directory",
    )


def test_a_database_url_in_a_folder_that_does_not_exist_names_database_url(tmp_path):
    database = tmp_path / "no such folder" / "bridge.sqlite3"
    env = bridge_env(tmp_path / "data", DATABASE_URL=f"sqlite:///{database}")
    result = start("token", env)
    assert_one_message(
        result, quoted(database), "DATABASE_URL", "cannot write in its folder: No such file or directory"
    )


# --- a database never migrated ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", USE_THE_DATABASE)
def test_a_database_never_migrated_stops_the_commands_that_use_it_with_one_message(tmp_path, command):
    data = tmp_path / "data"
    result = start(command, bridge_env(data))
    output = assert_one_message(
        result, quoted(data / "bridge.sqlite3"), f"BRIDGE_DATA_DIR={quoted(data)}", "migration(s) to apply", "migrate"
    )
    assert "make run" in output, "the message names the command that migrates for you"


# --- manage.py mcp, as Claude Desktop starts it ----------------------------------------------------------------------


def over_stdio(env: dict[str, str], stderr: Path, steps: Callable[[Client], Awaitable[Any]]) -> Any:
    """`manage.py mcp` over stdio, as Claude Desktop runs it: what `steps` return, its stderr kept in `stderr`."""

    async def main() -> Any:
        params = StdioServerParameters(command=sys.executable, args=[MANAGE_PY, "mcp"], env=env, cwd=REPO)
        with stderr.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
                return await steps(client)

    return asyncio.run(main())


def text(result: Any) -> str:
    return "\n".join(part.text for part in result.content if part.type == "text")


def applied_migrations(database: Path) -> int:
    with sqlite3.connect(database) as connection:
        return connection.execute("SELECT count(*) FROM django_migrations").fetchone()[0]


def test_mcp_migrates_a_database_that_never_was_and_its_tools_work(tmp_path):
    """Claude Desktop may start `manage.py mcp` before `make run` ever ran: it migrates the user's database itself."""
    data = tmp_path / "data"
    stderr = tmp_path / "mcp-stderr.txt"

    async def steps(client: Client) -> tuple[Any, Any]:
        return await client.call_tool("hermes_health", {}), await client.call_tool("hermes_jobs", {})

    health, jobs = over_stdio(bridge_env(data), stderr, steps)
    assert not jobs.is_error and "no such table" not in text(jobs), text(jobs)
    assert "DATABASE: ok" in text(health), text(health)
    assert applied_migrations(data / "bridge.sqlite3") > 0
    assert "Traceback" not in stderr.read_text(), stderr.read_text()


def required_arguments(tool: Any) -> dict[str, Any]:
    """Each argument `tool` requires, given: the first of its choices, else a value of its type (a word, a number)."""
    schema = tool.input_schema
    plain = {"integer": 1, "number": 1, "string": "x"}
    properties = schema["properties"]
    return {
        name: properties[name].get(
            "enum", [properties[name].get("const", plain.get(properties[name].get("type"), "x"))]
        )[0]
        for name in schema.get("required", [])
    }


def test_when_mcp_cannot_migrate_every_tool_answers_the_one_message_until_it_can(tmp_path):
    """A migration that fails (here: a table in its way) leaves the server up: each tool answers STATUS: error with
    the one message, whose traceback is in the data dir's log, not on stderr; once the cause is gone, the next call
    migrates and works, with no restart."""
    data = tmp_path / "data"
    data.mkdir()
    database = data / "bridge.sqlite3"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE jobs_task (in_the_way)")
    stderr = tmp_path / "mcp-stderr.txt"

    async def steps(client: Client) -> tuple[dict[str, Any], Any]:
        tools = (await client.list_tools()).tools
        refused = {tool.name: await client.call_tool(tool.name, required_arguments(tool)) for tool in tools}
        with sqlite3.connect(database) as connection:
            connection.execute("DROP TABLE jobs_task")
        return refused, await client.call_tool("hermes_jobs", {})

    refused, after = over_stdio(bridge_env(data), stderr, steps)
    log = data / "startup.log"
    assert set(refused) == TOOLS
    for tool, result in refused.items():
        reply = text(result)
        assert result.is_error and reply.startswith("STATUS: error\n"), (tool, reply)
        for word in (quoted(database), f"BRIDGE_DATA_DIR={quoted(data)}", "jobs_task", f"traceback is in {log}"):
            assert word in reply, (tool, word, reply)
        assert "internal_error" not in reply, (tool, reply)
    assert "Traceback" in log.read_text()
    assert "Traceback" not in stderr.read_text(), stderr.read_text()
    assert not after.is_error and "no such table" not in text(after), text(after)
