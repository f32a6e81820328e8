"""Driving the real Qwen Code CLI offline: its settings, its environment and its command, against the scripted
OpenAI chat-completions server of tests/fakes/openai_server.py, which serves it unchanged.

    with FakeOpenAI([tool_call("run_shell_command", {"command": "touch a"}), text("done")]) as fake:
        write_settings(home)
        env = offline_env(fake.url, home, proxy.url)    # OPENAI_BASE_URL=fake.url and the rest
        ... run qwen_command(prefix) in a folder, with env ...
        fake.main_requests     # the request bodies that consumed a scripted reply

The CLI's own model calls declare its tools, so the fake counts them as main; the settings below turn off the side
calls that would also declare tools (the managed-memory subagent after each turn) or that would leave loopback
(usage statistics). tests/fakes/QWEN_NOTES.md says what the CLI sends and why each setting is needed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.fakes.hermes_env import DEFAULT_PATH, PROXY_URL_VARS
from tests.fakes.openai_server import MODEL

REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_QWEN_PREFIX = REPO / ".tools" / "qwen"
API_KEY = "sk-fake-qwen-key"
# ~/.qwen/settings.json: no usage statistics (the CLI's only call home: Alibaba Cloud RUM), no update checks, no
# background memory agents and no follow-up suggestions (each would end a turn with a tool-declaring model call that
# eats the script), no `systemd-inhibit` child (and its D-Bus calls) during each turn, and no retries inside the OpenAI
# SDK (the CLI's own 7 attempts per model call stay).
SETTINGS: dict[str, dict[str, object]] = {
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "preventSystemSleep": False},
    "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
    "ui": {"enableFollowupSuggestions": False},
    "model": {"generationConfig": {"maxRetries": 0}},
}


def qwen_command(prefix: Path = DEFAULT_QWEN_PREFIX) -> list[str]:
    """`node cli.js --acp` from an npm prefix holding @qwen-code/qwen-code and the `node` package (Node >= 22):
    one process, where the `qwen` launcher would add a parent that dies alone on SIGTERM."""
    modules = prefix / "node_modules"
    return [str(modules / ".bin" / "node"), str(modules / "@qwen-code" / "qwen-code" / "cli.js"), "--acp"]


def write_settings(home: Path, **sections: dict[str, object]) -> Path:
    """`home`/.qwen/settings.json with SETTINGS, each given section's keys set over it."""
    settings = {name: dict(values) for name, values in SETTINGS.items()}
    for name, values in sections.items():
        settings.setdefault(name, {}).update(values)
    path = home / ".qwen" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1))
    return path


def offline_env(base_url: str, home: Path, proxy_url: str) -> dict[str, str]:
    """A complete (not merged) environment for `qwen --acp`: the fake as the OpenAI API, loopback direct and
    everything else to the recording proxy."""
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH") or DEFAULT_PATH,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_MODEL": MODEL,
        "QWEN_CODE_NO_RELAUNCH": "true",  # no supervising parent process
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for name in PROXY_URL_VARS:
        env[name] = proxy_url
    return env
