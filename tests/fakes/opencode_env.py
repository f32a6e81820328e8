"""Driving the real opencode CLI (`opencode acp`) offline: its config, its environment and its command, against the
scripted OpenAI chat-completions server of tests/fakes/openai_server.py, which serves it unchanged.

    with FakeOpenAI([tool_call("bash", {"command": "touch a"}), text("done")]) as fake:
        prepare_home(home)                                            # no npm install in ~/.config/opencode
        env = offline_env(config(fake.url), home, proxy.url)          # the fake as provider "fake", model "fake-model"
        ... run opencode_command(prefix) in a folder, with env ...

The endpoint, the key and the model are a provider in opencode's config: no OPENAI_* variable names a chat-completions
server or a model, and a model it cannot use is silently replaced by a free model of opencode.ai's own. The config goes
in OPENCODE_CONFIG_CONTENT, which wins over the opencode.json files of the folder and of every folder above it
(OPENCODE_CONFIG would not). Left alone the CLI also fetches its model catalogue (models.opencode.ai) and runs `npm
install @opencode-ai/plugin` in every config folder it reads; the variables and files below stop both.
tests/fakes/OPENCODE_NOTES.md says what the CLI sends and why each setting is needed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.fakes.hermes_env import DEFAULT_PATH, PROXY_URL_VARS
from tests.fakes.openai_server import MODEL

REPO = Path(__file__).resolve().parent.parent.parent
OPENCODE_VERSION = "1.18.33"
DEFAULT_OPENCODE_PREFIX = REPO / ".tools" / "opencode"
API_KEY = "sk-fake-opencode-key"
PROVIDER = "fake"
MODEL_REF = f"{PROVIDER}/{MODEL}"
CONTEXT_LIMIT = 131072  # without a context limit for the model the CLI sends no `usage_update`
# Every tool that changes something or leaves the folder asks; reading and searching inside it does not. opencode's
# own default is "allow" for all of them (only doom loops, other folders and .env files ask).
ASK_PERMISSIONS = {"bash": "ask", "edit": "ask", "webfetch": "ask", "websearch": "ask", "task": "ask"}


def opencode_command(prefix: Path = DEFAULT_OPENCODE_PREFIX) -> list[str]:
    """`opencode acp` from an npm prefix holding opencode-ai: its postinstall links the platform's native binary
    (opencode-linux-x64, or -baseline without AVX2) to bin/opencode.exe, which node_modules/.bin/opencode names."""
    return [str(prefix / "node_modules" / ".bin" / "opencode"), "acp"]


def config(base_url: str, **overrides: object) -> dict[str, object]:
    """An opencode config whose only provider and model are the fake's, with no update checks and no sharing."""
    settings: dict[str, object] = {
        "model": MODEL_REF,
        "small_model": MODEL_REF,  # the session title, one call per session
        "enabled_providers": [PROVIDER],  # not opencode.ai's free models, which it falls back to
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake",
                "options": {"baseURL": base_url, "apiKey": API_KEY},
                "models": {MODEL: {"name": "Fake model", "limit": {"context": CONTEXT_LIMIT, "output": 8192}}},
            }
        },
    }
    settings.update(overrides)
    return settings


def prepare_home(home: Path) -> Path:
    """`home`/.config/opencode with a node_modules folder and a lock file that already name @opencode-ai/plugin: the
    CLI then skips the `npm install` it would run there at every start (registry.npmjs.org; read in `Npm.install`)."""
    folder = home / ".config" / "opencode"
    (folder / "node_modules").mkdir(parents=True, exist_ok=True)
    dependencies = {"@opencode-ai/plugin": OPENCODE_VERSION}
    (folder / "package.json").write_text(json.dumps({"dependencies": dependencies}))
    (folder / "package-lock.json").write_text(json.dumps({"packages": {"": {"dependencies": dependencies}}}))
    return folder


def offline_env(settings: dict[str, object], home: Path, proxy_url: str, **extra: str) -> dict[str, str]:
    """A complete (not merged) environment for `opencode acp`: `settings` (see `config`) as its config, no models.dev
    catalogue, loopback direct and everything else to the recording proxy."""
    env = {
        "HOME": str(home),
        "PATH": os.environ.get("PATH") or DEFAULT_PATH,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "OPENCODE_CONFIG_CONTENT": json.dumps(settings),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",  # else its model catalogue is fetched at start and every 60 minutes
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for name in PROXY_URL_VARS:
        env[name] = proxy_url
    env.update(extra)
    return env
