"""Driving Debian's chromium with Playwright for the browser tests: the browser, the one-time login, screenshots.

Playwright never downloads a browser of its own here; `make browser` installs the system chromium.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.bridge_server import BridgeServer

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
]
LOGIN_LINK_RE = re.compile(r"one-time login link.*?: (http://\S+)")


def start_browser(api, profile: Path):
    """A fresh profile each time; the system chromium only."""
    return api.chromium.launch_persistent_context(
        str(profile),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1280, "height": 900},
    )


def login_link(server: BridgeServer) -> str:
    for line in server.stdout_lines:
        match = LOGIN_LINK_RE.search(line)
        if match:
            return match.group(1)
    raise AssertionError(f"runbridge printed no login link:\n{server.output()}")


def logged_in(api, server: BridgeServer, profile: Path, timeout_ms: int = 20_000):
    """A browser logged in to `server` with its one-time login link (which then works no more)."""
    ctx = start_browser(api, profile)
    ctx.set_default_timeout(timeout_ms)
    page = ctx.new_page()
    page.goto(login_link(server))
    page.wait_for_url(server.url + "/")
    page.close()
    return ctx


def expect():
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
