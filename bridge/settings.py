"""Bridge settings, read from the environment (every name is documented in the README's settings table)."""

import ipaddress
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path

import dj_database_url

from bridge import data_dir

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_number(name: str, default: float, minimum: float, parse: Callable[[str], float], noun: str) -> float:
    """The number a variable holds, or `default` when it is unset; any other value stops the start-up, naming it."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r} is not {noun}") from None
    if not value >= minimum:
        raise SystemExit(f"{name}={value} must be at least {minimum}")
    return value


def env_int(name: str, default: int, minimum: int = 0) -> int:
    return int(_env_number(name, default, minimum, int, "a whole number"))


def env_float(name: str, default: float, minimum: float) -> float:
    return _env_number(name, default, minimum, float, "a number")


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def env_bool(name: str, default: bool) -> bool:
    """A switch: one of TRUE_WORDS or FALSE_WORDS (any case). Any other word stops the start-up, naming both lists: a
    misspelt `enabled` must not turn a feature off without a word."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in TRUE_WORDS:
        return True
    if raw in FALSE_WORDS:
        return False
    raise SystemExit(
        f"{name}={os.environ[name].strip()!r} is not a yes or a no: use one of {', '.join(TRUE_WORDS)} "
        f"or one of {', '.join(FALSE_WORDS)}"
    )


def env_list(name: str, default: list[str], sep: str = ",") -> list[str]:
    raw = os.environ.get(name, "")
    items = [item.strip() for item in raw.split(sep) if item.strip()]
    return items or default


DATA_DIR = Path(os.environ.get("BRIDGE_DATA_DIR") or BASE_DIR / "var").expanduser().resolve()
data_dir.make_data_dir(DATA_DIR)


data_dir.owner_only(DATA_DIR, 0o700)


# DJANGO_SECRET_KEY, else a key made once.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or data_dir.kept_value(
    DATA_DIR / "secret_key", lambda: secrets.token_urlsafe(50)
)
# This install's name for the machine it runs on: unlike the host name, it does not change when the network renames
# the machine (jobs/actions/tasks.py, session_home).
BRIDGE_MACHINE_ID = data_dir.kept_value(DATA_DIR / "machine_id", lambda: secrets.token_hex(8))
# What each local doorbell datagram carries, so its processes hear only each other (jobs/core/doorbell.py, _LocalBell).
BRIDGE_DOORBELL_SECRET = data_dir.kept_value(DATA_DIR / "doorbell_secret", lambda: secrets.token_hex(16))
DEBUG = env_bool("BRIDGE_DEBUG", False)
ALLOWED_HOSTS = env_list("BRIDGE_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("BRIDGE_CSRF_TRUSTED_ORIGINS", [])

# Not "daphne": its app replaces `runserver`, which Bridge does not use (runbridge serves), and it loads Twisted into
# every process, the supervisor's and the stdio MCP server's included (27 MB each).
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",
    "jobs",
]

MIDDLEWARE = [
    "jobs.web.middleware.DatabaseBusyMiddleware",  # first: a busy database is a JSON 503 wherever it shows
    "jobs.web.middleware.api_answers_json",  # every error under /v1/ in the API's JSON shape
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "bridge.urls"
ASGI_APPLICATION = "bridge.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# SQLite options that hold up with a web process and a worker writing at once (docs/architecture.md, "Process model").
SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}
# Django's SQLite backend with each transaction's BEGIN on a cursor closed on its own thread (bridge/sqlite3/base.py)
SQLITE_ENGINE = "bridge.sqlite3"

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": dj_database_url.parse(os.environ["DATABASE_URL"], conn_max_age=0)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        DATABASES["default"]["ENGINE"] = SQLITE_ENGINE
        DATABASES["default"]["OPTIONS"] = dict(SQLITE_OPTIONS)
else:
    DATABASES = {
        "default": {
            "ENGINE": SQLITE_ENGINE,
            "NAME": str(DATA_DIR / "bridge.sqlite3"),
            "OPTIONS": dict(SQLITE_OPTIONS),
        }
    }
if DATABASES["default"]["ENGINE"] == SQLITE_ENGINE:
    # Each thread keeps its SQLite connection: opening one (and its PRAGMAs) cost every request and every stream
    # read more than the query itself. Nothing is held open between statements (autocommit), so no snapshot goes stale.
    DATABASES["default"]["CONN_MAX_AGE"] = None
    # Tests run threads and subprocesses against one database: it must be a real file, not shared memory.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}
    if str(DATABASES["default"]["NAME"]) != ":memory:":
        # made 0600 before SQLite opens it: SQLite gives the database's -wal and -shm files its mode
        data_dir.owner_only(Path(DATABASES["default"]["NAME"]), 0o600)

# How messages name the database, and the fix they offer last (jobs/management/startup.py); a SQLite file Bridge
# cannot use stops the start-up here, naming it.
DATABASE_SETTING = data_dir.database_setting()
DATABASE_ELSEWHERE = data_dir.elsewhere()
DATABASE_PLACE = data_dir.database_place(DATABASES["default"], DATA_DIR)
if data_dir.is_sqlite(DATABASES["default"]) and str(DATABASES["default"]["NAME"]) != ":memory:":
    data_dir.check_sqlite_file(DATABASES["default"], DATA_DIR)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = os.environ.get("REDIS_URL", "")
# channels-redis blocks 5 s per read of a channel; redis-py (8+) gives up on a socket read after 5 s by default, so a
# listener idle that long would fail and reconnect every 5 s. Reads may take longer (`?socket_timeout=N` wins).
REDIS_SOCKET_TIMEOUT_S = 15


def redis_channel_layer(url: str) -> dict:
    """The channel layer over the Redis at `url`: what REDIS_URL configures, and what the tests configure."""
    return {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": url, "socket_timeout": REDIS_SOCKET_TIMEOUT_S}]},
    }


if REDIS_URL:
    CHANNEL_LAYERS = {"default": redis_channel_layer(REDIS_URL)}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
# Django sets this process's TZ to TIME_ZONE as it starts. The TZ it was started with (None: unset) is what agents
# and Bridge's own processes get instead (`executors.started_environ`): an agent keeps the user's time zone.
STARTED_WITH_TZ = os.environ.get("TZ")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "jobs": {"handlers": ["console"], "level": os.environ.get("BRIDGE_LOG_LEVEL", "INFO")},
        # every 500 Django answers itself (a bug in a page or a middleware), with its traceback; 4xx stay quiet
        "django.request": {"handlers": ["console"], "level": "ERROR", "propagate": False},
    },
}

# --- Bridge ---------------------------------------------------------------------------------------------

BRIDGE_ALLOWED_ROOTS = [
    Path(p).expanduser() for p in env_list("BRIDGE_ALLOWED_ROOTS", [str(DATA_DIR / "work")], sep=os.pathsep)
]
if "BRIDGE_ALLOWED_ROOTS" not in os.environ:
    (DATA_DIR / "work").mkdir(exist_ok=True)
BRIDGE_DEFAULT_CWD = Path(os.environ.get("BRIDGE_DEFAULT_CWD") or BRIDGE_ALLOWED_ROOTS[0]).expanduser()
BRIDGE_CLAUDE_BIN = os.environ.get("BRIDGE_CLAUDE_BIN", "claude")
BRIDGE_CLAUDE_PARTIAL = env_bool("BRIDGE_CLAUDE_PARTIAL", True)
BRIDGE_MAX_CONCURRENT = env_int("BRIDGE_MAX_CONCURRENT", 3, minimum=1)
BRIDGE_MAX_QUEUED = env_int("BRIDGE_MAX_QUEUED", 1000, minimum=1)
# A task's wall-time limit when it names none; 0 means no limit (hbridge's default). Explicit limits stay capped.
BRIDGE_TASK_TIMEOUT_S = env_int("BRIDGE_TASK_TIMEOUT_S", 1800, minimum=0)
BRIDGE_PERMISSION_TIMEOUT_S = env_int("BRIDGE_PERMISSION_TIMEOUT_S", 600, minimum=1)
# Bridge's own address as a person's phone or a webhook receiver reaches it: one-tap decision links are made on it.
BRIDGE_PUBLIC_URL = os.environ.get("BRIDGE_PUBLIC_URL", "http://127.0.0.1:8800").rstrip("/")
BRIDGE_MAX_PROMPT_BYTES = env_int("BRIDGE_MAX_PROMPT_BYTES", 256 * 1024, minimum=1)
# A request body Django reads at most; a larger one is answered 413 (web/middleware.py). Room for the largest prompt
# and a permission's updatedInput (1 MiB) even when JSON escapes every character as \uXXXX (six bytes each).
DATA_UPLOAD_MAX_MEMORY_SIZE = max(8 * 1024 * 1024, 6 * BRIDGE_MAX_PROMPT_BYTES + 64 * 1024)
BRIDGE_MAX_LINE_BYTES = env_int("BRIDGE_MAX_LINE_BYTES", 4 * 1024 * 1024, minimum=1024)
BRIDGE_MAX_OUTPUT_BYTES = env_int("BRIDGE_MAX_OUTPUT_BYTES", 64 * 1024 * 1024, minimum=1024)
# The agent's stdout a task's raw transcript keeps (GET /v1/task/transcript), newlines included; the lines after it are
# counted in one note at the end. 0 keeps none.
BRIDGE_MAX_TRANSCRIPT_BYTES = env_int("BRIDGE_MAX_TRANSCRIPT_BYTES", 64 * 1024 * 1024, minimum=0)
# What a task changed in its working directory (jobs/workspace/snapshots.py): recorded unless BRIDGE_CHANGES is off; at
# most this many files listed, and this much unified patch kept; past either, the record says it is truncated and what
# was left out.
BRIDGE_CHANGES = env_bool("BRIDGE_CHANGES", True)
BRIDGE_CHANGES_MAX_FILES = env_int("BRIDGE_CHANGES_MAX_FILES", 5000, minimum=1)
BRIDGE_CHANGES_MAX_BYTES = env_int("BRIDGE_CHANGES_MAX_BYTES", 4 * 1024 * 1024, minimum=1024)
# Tasks that asked for `isolation: "worktree"` run in a git worktree of their own on a branch `bridge/<id>`
# (jobs/workspace/worktrees.py), made under this directory; one that is neither merged nor discarded is removed
# BRIDGE_WORKTREE_KEEP_DAYS after its task ended. Under BRIDGE_WORKTREE_ROOTS (os.pathsep-separated) isolation is the
# default. Commits Bridge makes when merging carry BRIDGE_GIT_AUTHOR ("Name <email>").
BRIDGE_WORKTREES_DIR = (
    Path(os.environ.get("BRIDGE_WORKTREES_DIR", "").strip() or DATA_DIR / "worktrees").expanduser().resolve()
)
BRIDGE_WORKTREE_KEEP_DAYS = env_int("BRIDGE_WORKTREE_KEEP_DAYS", 7, minimum=0)
BRIDGE_WORKTREE_ROOTS = env_list("BRIDGE_WORKTREE_ROOTS", [], sep=os.pathsep)
BRIDGE_GIT_AUTHOR = os.environ.get("BRIDGE_GIT_AUTHOR", "").strip() or "Bridge <bridge@localhost>"
BRIDGE_STDERR_TAIL_BYTES = env_int("BRIDGE_STDERR_TAIL_BYTES", 64 * 1024, minimum=1024)
BRIDGE_KILL_GRACE_S = env_int("BRIDGE_KILL_GRACE_S", 5, minimum=0)
# How agents are started and stopped (jobs/processes): auto = the OS's own backend; portable = psutil only.
BRIDGE_PROCESS_BACKEND = os.environ.get("BRIDGE_PROCESS_BACKEND", "auto").strip() or "auto"
if BRIDGE_PROCESS_BACKEND not in ("auto", "posix", "portable", "windows"):
    raise SystemExit(f"BRIDGE_PROCESS_BACKEND={BRIDGE_PROCESS_BACKEND!r} must be auto, posix, portable or windows")
# Whether agents run in a sandbox that hides Bridge's data and processes (jobs/processes/sandbox.py): auto = where
# one works; on = refuse to start without one; off = never.
BRIDGE_SANDBOX = os.environ.get("BRIDGE_SANDBOX", "auto").strip().lower() or "auto"
if BRIDGE_SANDBOX not in ("auto", "on", "off"):
    raise SystemExit(f"BRIDGE_SANDBOX={BRIDGE_SANDBOX!r} must be auto, on or off")
BRIDGE_DRAIN_S = env_int("BRIDGE_DRAIN_S", 30, minimum=0)
# A supervisor rides out an unreachable database (a dropped connection, no connection slot, SQLite's write lock held),
# retrying with backoff and holding each run's output in memory. A running agent whose output has waited longer than
# BRIDGE_DB_OUTAGE_S is stopped; its task ends `failed`, saying so, as soon as the database answers again.
BRIDGE_DB_OUTAGE_S = env_int("BRIDGE_DB_OUTAGE_S", 60, minimum=1)
# Output one run may hold in memory meanwhile; past it only essential events are kept and the rest are counted.
BRIDGE_DB_BUFFER_BYTES = env_int("BRIDGE_DB_BUFFER_BYTES", 16 * 1024 * 1024, minimum=64 * 1024)
# While the disk that holds the database is full, a run holds at most this much of its output (the rest is counted in
# `truncated` events): what it holds is written once space is freed, and more would fill that space again at once.
BRIDGE_DB_FULL_BUFFER_BYTES = env_int("BRIDGE_DB_FULL_BUFFER_BYTES", 1024 * 1024, minimum=0)
BRIDGE_POLL_S = env_float("BRIDGE_POLL_S", 0.5, minimum=0.05)
# What a supervisor answers to besides its host (`manage.py supervise --name/--label` override these): a task whose
# target is its name, its host or one of its labels may run on it; one with no target, on any that serves its cwd.
BRIDGE_SUPERVISOR_NAME = os.environ.get("BRIDGE_SUPERVISOR_NAME", "").strip()
BRIDGE_SUPERVISOR_LABELS = env_list("BRIDGE_SUPERVISOR_LABELS", [])
# Connections the OS queues before runbridge accepts them: a burst of 200 at once must not be reset (the OS may cap
# it lower: net.core.somaxconn on Linux).
BRIDGE_LISTEN_BACKLOG = env_int("BRIDGE_LISTEN_BACKLOG", 1024, minimum=1)
# Threads that run plain (not streaming) HTTP requests, each keeping its database connection between requests; more
# requests at once wait their turn (bridge/asgi.py).
BRIDGE_WEB_THREADS = env_int("BRIDGE_WEB_THREADS", 8, minimum=1)
# Processes that serve runbridge's port, sharing its socket (one on Windows): Python runs one thread at a time per
# process, so a second process lets requests use a second core. With more than one, runbridge's own process only
# supervises, so no stream waits behind the recording of output. Two by default where there are two cores; more cost
# memory a local server rarely repays.
BRIDGE_WEB_PROCESSES = env_int("BRIDGE_WEB_PROCESSES", min(2, os.cpu_count() or 1), minimum=1)
BRIDGE_SSE_HEARTBEAT_S = env_int("BRIDGE_SSE_HEARTBEAT_S", 15, minimum=1)
# A stream client (SSE or websocket) that reads nothing for this long is disconnected: what it has not read is
# bounded by the connection's buffer (jobs/web/webserver.py), and a stuck client must not hold a stream forever.
BRIDGE_STREAM_STALL_S = env_int("BRIDGE_STREAM_STALL_S", 60, minimum=1)
# What a connection may hold of a web process (jobs/web/webserver.py, ConnectionLimits). A request's line and headers
# must all arrive within BRIDGE_HTTP_HEADER_TIMEOUT_S of the connection's accept (or, on a keep-alive connection, of the
# request's first byte), however they trickle in; a connection with no request in progress is closed after
# BRIDGE_HTTP_IDLE_S (an open stream has one in progress); a websocket silent for BRIDGE_WS_PING_INTERVAL_S is pinged
# and closed if no pong comes within BRIDGE_WS_PING_TIMEOUT_S. One client address may hold
# BRIDGE_HTTP_MAX_CONNECTIONS_PER_CLIENT connections open in each web process: room for a client's burst of 200
# (tests/integration/test_concurrency.py) or a stream on each of 200 tasks, beside a browser and a status line.
BRIDGE_HTTP_HEADER_TIMEOUT_S = env_float("BRIDGE_HTTP_HEADER_TIMEOUT_S", 15, minimum=0.1)
BRIDGE_HTTP_IDLE_S = env_float("BRIDGE_HTTP_IDLE_S", 60, minimum=0.1)
BRIDGE_HTTP_MAX_CONNECTIONS_PER_CLIENT = env_int("BRIDGE_HTTP_MAX_CONNECTIONS_PER_CLIENT", 256, minimum=1)
BRIDGE_WS_PING_INTERVAL_S = env_float("BRIDGE_WS_PING_INTERVAL_S", 20, minimum=1)
BRIDGE_WS_PING_TIMEOUT_S = env_float("BRIDGE_WS_PING_TIMEOUT_S", 30, minimum=1)
BRIDGE_PASS_ENV = env_list("BRIDGE_PASS_ENV", [])
BRIDGE_READ_ROOTS = [Path(p).expanduser() for p in env_list("BRIDGE_READ_ROOTS", [], sep=os.pathsep)]
BRIDGE_READ_ANYWHERE = env_bool("BRIDGE_READ_ANYWHERE", False)
BRIDGE_READ_MAX_BYTES = env_int("BRIDGE_READ_MAX_BYTES", 1024 * 1024, minimum=1024)
BRIDGE_MCP_MAX_WAIT_S = env_int("BRIDGE_MCP_MAX_WAIT_S", 150, minimum=1)
BRIDGE_MCP_OUTPUT_CHARS = env_int("BRIDGE_MCP_OUTPUT_CHARS", 100_000, minimum=1000)
BRIDGE_HERMES_BIN = os.environ.get("BRIDGE_HERMES_BIN", "hermes")
BRIDGE_HERMES_HOME = Path(os.environ.get("HERMES_HOME") or "~/.hermes").expanduser()
BRIDGE_HERMES_MODE = os.environ.get("BRIDGE_HERMES_MODE", "").strip().lower() or "auto"
if BRIDGE_HERMES_MODE not in ("auto", "acp", "oneshot"):
    raise SystemExit(f"BRIDGE_HERMES_MODE={BRIDGE_HERMES_MODE!r} must be auto, acp or oneshot")
# The ACP agents a user declares (jobs/agents/registry.py): read once per process, checked at start-up.
BRIDGE_AGENTS_FILE = Path(os.environ.get("BRIDGE_AGENTS_FILE") or DATA_DIR / "agents.toml").expanduser()

HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")


def webhook_hosts(name: str, default: list[str]) -> list[str]:
    """The hosts webhooks may reach: host names, IP addresses and networks (`10.0.0.0/8`); anything else stops the
    start-up, naming it (a URL or a typo must not silently allow nothing, or something else)."""
    hosts = [host.removeprefix("[").removesuffix("]") for host in env_list(name, default)]
    for host in hosts:
        try:
            ipaddress.ip_network(host, strict=False)
        except ValueError:
            if not HOST_NAME.fullmatch(host):
                raise SystemExit(
                    f"{name} holds {host!r}, which is neither a host name, an IP address nor a network "
                    "(such as 127.0.0.1, localhost, ::1, hooks.example.com, 192.168.1.0/24)"
                ) from None
    return hosts


# Webhooks (jobs/actions/webhooks.py, jobs/supervision/deliveries.py): a webhook's URL must name one of
# BRIDGE_WEBHOOK_HOSTS (host names, IP addresses, networks), and Bridge connects only to the addresses they stand for,
# checked when the webhook is made and again, names resolved, at every delivery. Each try waits at most
# BRIDGE_WEBHOOK_TIMEOUT_S per step (connect, send, each read); a failed try is retried after
# BRIDGE_WEBHOOK_BACKOFF_S, doubling (with jitter, at most an hour apart), until BRIDGE_WEBHOOK_RETRY_S after the event;
# each supervisor process sends BRIDGE_WEBHOOK_CONCURRENCY at once (one per webhook); the delivery log keeps what ended
# for BRIDGE_WEBHOOK_KEEP_DAYS.
BRIDGE_WEBHOOK_HOSTS = webhook_hosts("BRIDGE_WEBHOOK_HOSTS", ["127.0.0.1", "localhost", "::1"])
BRIDGE_WEBHOOK_TIMEOUT_S = env_float("BRIDGE_WEBHOOK_TIMEOUT_S", 10, minimum=0.1)
BRIDGE_WEBHOOK_BACKOFF_S = env_float("BRIDGE_WEBHOOK_BACKOFF_S", 5, minimum=0.01)
BRIDGE_WEBHOOK_RETRY_S = env_int("BRIDGE_WEBHOOK_RETRY_S", 86400, minimum=1)
BRIDGE_WEBHOOK_CONCURRENCY = env_int("BRIDGE_WEBHOOK_CONCURRENCY", 4, minimum=1)
BRIDGE_WEBHOOK_KEEP_DAYS = env_int("BRIDGE_WEBHOOK_KEEP_DAYS", 30, minimum=1)

# --- database: bounded connections (docs/architecture.md, "Process model") ----------------------------------------
# PostgreSQL connections one process may hold, shared by its web requests and its supervisor (which keeps one per
# running task plus two for as long as they run); 0 turns pooling off (one connection per thread, as with PgBouncer).
BRIDGE_DB_POOL_SIZE = env_int("BRIDGE_DB_POOL_SIZE", max(10, BRIDGE_MAX_CONCURRENT + 5), minimum=0)
# How long a request waits for a pooled connection (PostgreSQL) or the write lock (SQLite, web requests only) before
# it is answered 503 database_busy; supervisors keep SQLite's longer busy timeout.
BRIDGE_DB_POOL_TIMEOUT_S = env_float("BRIDGE_DB_POOL_TIMEOUT_S", 5.0, minimum=0.1)
BRIDGE_DB_RETRY_AFTER_S = env_int("BRIDGE_DB_RETRY_AFTER_S", 2, minimum=1)  # the Retry-After a busy answer gives
# The Retry-After of a 503 storage_full (the disk is full): space comes back when a person frees it, not in seconds.
BRIDGE_STORAGE_RETRY_AFTER_S = env_int("BRIDGE_STORAGE_RETRY_AFTER_S", 30, minimum=1)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and BRIDGE_DB_POOL_SIZE:
    try:
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise SystemExit(
            "PostgreSQL connections are pooled, and psycopg_pool is not installed: pip install 'psycopg[binary,pool]' "
            "(or pip install -e '.[postgres]'), or set BRIDGE_DB_POOL_SIZE=0 to open one connection per thread"
        ) from None
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps connections; Django must hand them back after each use
    # A pooled connection the server has since closed (a restart, pg_terminate_backend) is checked and replaced when
    # handed out, instead of failing the request that got it (Django passes this on as the pool's `check`).
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(2, BRIDGE_DB_POOL_SIZE),
        "max_size": BRIDGE_DB_POOL_SIZE,
        "timeout": BRIDGE_DB_POOL_TIMEOUT_S,
    }
# PostgreSQL ends a session that sits this long inside a transaction without a statement, releasing its locks: a
# frozen process (SIGSTOP, a suspended laptop or VM) would otherwise hold its task's row, and with it every write to
# that task, for as long as it is frozen. Bridge's own transactions go from statement to statement at once. 0: off
# (PgBouncer refuses the `options` start-up parameter unless told to ignore it).
BRIDGE_PG_IDLE_IN_TRANSACTION_S = env_float("BRIDGE_PG_IDLE_IN_TRANSACTION_S", 30, minimum=0)
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and BRIDGE_PG_IDLE_IN_TRANSACTION_S:
    _pg_options = DATABASES["default"].setdefault("OPTIONS", {})
    _pg_options["options"] = (
        f"{_pg_options.get('options', '')} "
        f"-c idle_in_transaction_session_timeout={max(1, round(BRIDGE_PG_IDLE_IN_TRANSACTION_S * 1000))}"
    ).strip()

# --- browser pages ---------------------------------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"
PASSWORD_RESET_TIMEOUT = 3600  # also bounds runbridge's one-time login link
