"""The environment for running the real Claude Code CLI fully offline against a local fake API.

Only loopback is reachable: the API goes to ``base_url`` (a FakeAnthropic on 127.0.0.1), and any HTTP(S) traffic the
CLI might still attempt elsewhere is sent to a proxy on a closed loopback port (refused at once) — NO_PROXY keeps
127.0.0.1/localhost direct. Verified with ``strace -f -e trace=connect``: see tests/fakes/NOTES.md.
"""

from __future__ import annotations

import os

CLOSED_PROXY = "http://127.0.0.1:9"  # discard port; nothing listens there -> ECONNREFUSED

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def offline_env(base_url: str, home: str, path: str | None = None) -> dict[str, str]:
    """A complete (not merged) environment for a claude subprocess. ``home`` should be a fresh temp dir per test;
    reuse the same one to ``--resume`` a session (sessions live in $HOME/.claude/projects/)."""
    return {
        "HOME": home,
        "PATH": path or os.environ.get("PATH") or DEFAULT_PATH,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-fake-offline-key",
        # no telemetry, error reports, auto-update, or other non-essential traffic; no retries (fail fast)
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        # safety net: anything that is not loopback goes to a refusing proxy
        "HTTP_PROXY": CLOSED_PROXY,
        "HTTPS_PROXY": CLOSED_PROXY,
        "http_proxy": CLOSED_PROXY,
        "https_proxy": CLOSED_PROXY,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
