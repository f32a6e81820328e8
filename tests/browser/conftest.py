"""The browser tests' Playwright and a logged-in browser, once per module (helpers: tests/browser/chromium.py); a
module that uses `context` or `page` defines the `bridge` they log in to."""

import pytest

from tests.browser.chromium import CHROMIUM, logged_in
from tests.support import skip_or_fail


@pytest.fixture(scope="module")
def playwright_api():
    if not CHROMIUM.exists():
        skip_or_fail(f"chromium is not installed at {CHROMIUM} (run `make browser`)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("Playwright for Python is not installed (pip install -e '.[test]')")
    from playwright.sync_api import expect as playwright_expect

    # Playwright's 5 s default is shorter than a real CLI's start on a busy machine; a wait ends at the event anyway.
    playwright_expect.set_options(timeout=20_000)
    with sync_playwright() as api:
        yield api


@pytest.fixture(scope="module")
def context(playwright_api, bridge, tmp_path_factory):
    ctx = logged_in(playwright_api, bridge, tmp_path_factory.mktemp("profile"))
    yield ctx
    ctx.close()


@pytest.fixture
def page(context):
    page = context.new_page()
    yield page
    page.close()
