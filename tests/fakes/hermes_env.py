"""The environment for running the real Hermes CLI offline against a local fake OpenAI server (DESIGN.md,
"Offline test config"), plus a recording proxy: any HTTP(S) traffic Hermes attempts beyond loopback goes to it,
and tests assert it saw nothing.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
DEFAULT_HERMES_BIN = REPO / ".tools" / "hermes" / "bin" / "hermes"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROXY_URL_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
PROXY_VARS = (*PROXY_URL_VARS, "NO_PROXY", "no_proxy")

CONFIG = """\
model:
  provider: custom
  base_url: {base_url}
  default: fake-model
  api_key: sk-fake-offline-key
  context_length: 131072
security:
  tirith_enabled: false
  allow_lazy_installs: false
agent:
  environment_probe: false
  api_max_retries: 1  # an API error fails the run at once instead of after Hermes's retry backoff (~10 s)
"""


def installed_version(hermes_bin: Path = DEFAULT_HERMES_BIN) -> str:
    """The hermes-agent version next to this executable, from its package metadata (running it would go online)."""
    prefix = Path(hermes_bin).resolve().parent.parent
    for dist_info in prefix.glob("lib/python*/site-packages/hermes_agent-*.dist-info"):
        return dist_info.name.removeprefix("hermes_agent-").removesuffix(".dist-info")
    return ""


def write_hermes_home(home: Path, base_url: str, hermes_bin: Path = DEFAULT_HERMES_BIN) -> Path:
    """A HERMES_HOME that points at the fake server and never checks for updates or installs anything.

    The update-check cache only counts when `ver` equals the installed version and `rev` is null (0.19.0): a cache
    of just `{ts, behind}` is ignored and Hermes asks pypi.org.
    """
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(CONFIG.format(base_url=base_url))
    cache = {"ts": time.time(), "behind": 0, "rev": None, "ver": installed_version(hermes_bin)}
    (home / ".update_check").write_text(json.dumps(cache))
    return home


def offline_env(hermes_home: Path, home: Path, proxy_url: str, path: str | None = None) -> dict[str, str]:
    """A complete (not merged) environment for a hermes subprocess: loopback direct, everything else to the proxy."""
    env = {
        "HOME": str(home),
        "PATH": path or os.environ.get("PATH") or DEFAULT_PATH,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "HERMES_HOME": str(hermes_home),
        "HERMES_DISABLE_LAZY_INSTALLS": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for name in PROXY_URL_VARS:
        env[name] = proxy_url
    return env


class RecordingProxy:
    """Accepts connections on 127.0.0.1, records the first line of each (e.g. `CONNECT pypi.org:443`) and closes.

    Hermes should never reach it: every test that uses it asserts `requests == []`.
    """

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, name="recording-proxy", daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    head = conn.recv(4096)
                except OSError:
                    head = b""
                self.requests.append(head.split(b"\r\n", 1)[0].decode(errors="replace") or "(empty connection)")
                try:
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    pass

    def __enter__(self) -> RecordingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()
