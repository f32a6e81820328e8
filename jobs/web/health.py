"""The cheap `/health`: Bridge's web server answers `GET /health` and `HEAD /health` from a snapshot of Django's own
answer, taken at most MAX_AGE_S before the request came, instead of running the health view for every request.

The view (jobs/web/views.py `health`) reads the database five times and asks each executor whether it can run, and
settles dead supervisors' tasks as it goes (jobs/actions/liveness.py `system_state`): through Django it served
54–128 requests a second where `GET /v1/task` served 219–362, and a load balancer or status line polls it. Each web
process now keeps the last answer the view gave (`HealthSnapshot`): a request that finds it younger than
REFRESH_AFTER_S is answered from it with no database read; the first that finds it older starts one refresh (one call
of the view, on the request threads, as any request is) and is answered from the snapshot it has, as are the others
while the refresh runs; only a request that finds it older than MAX_AGE_S (or none yet) waits, for that same refresh.
So the view runs at most about twice a second per web process, and its answer, the 503 of an unreachable database
included, is at most MAX_AGE_S old.

A request's Host is checked first, by Django's own rule (`host_is_allowed`); one Django would refuse goes to Django,
which answers its 400 as for any other path.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest

if TYPE_CHECKING:
    from a2wsgi.asgi_typing import HTTPScope
    from a2wsgi.wsgi_typing import Environ

log = logging.getLogger(__name__)

PATH = "/health"
METHODS = ("GET", "HEAD")
REFRESH_AFTER_S = 0.5  # a snapshot this old is refreshed by the first request that finds it so ...
MAX_AGE_S = 1.0  # ... and none older than this is ever served: a request that finds it so waits for the refresh
HOST_HEADERS = ("HTTP_HOST", "HTTP_X_FORWARDED_HOST", "HTTP_X_FORWARDED_PORT")  # what Django's Host check reads

# An HTTP answer as it goes out: (status, headers, body).
Reply = tuple[int, list[tuple[bytes, bytes]], bytes]


def is_health_check(scope: HTTPScope) -> bool:
    """Whether an ASGI HTTP request is exactly `GET /health` or `HEAD /health` (any query string, which the view
    ignores)."""
    return scope["path"] == PATH and scope["method"] in METHODS


class _HostOnly(HttpRequest):
    """A request that is only its WSGI environ: all `HttpRequest.get_host` reads (Django's `WSGIRequest` skips
    `HttpRequest.__init__` the same way)."""

    def __init__(self, environ: Environ) -> None:
        self.META = environ  # type: ignore[assignment]  # a WSGI environ is what Django's META is


def host_is_allowed(environ: Environ) -> bool:
    """Whether Django would take this request's Host: its own `get_host`, with ALLOWED_HOSTS (and its defaults under
    DEBUG) and USE_X_FORWARDED_HOST, which Django's CommonMiddleware calls on every request."""
    try:
        _HostOnly(environ).get_host()
    except DisallowedHost:
        return False
    return True


def refresh_environ(environ: Environ) -> Environ:
    """The WSGI environ of a plain `GET /health` from the same Host as the request `environ`: no query, no body, no
    cookie or credentials, so the answer kept for every caller is the one any caller would get."""
    kept = {key: value for key, value in environ.items() if not key.startswith("HTTP_") or key in HOST_HEADERS}
    kept.pop("CONTENT_LENGTH", None)
    kept.pop("CONTENT_TYPE", None)
    fresh = {**kept, "REQUEST_METHOD": "GET", "PATH_INFO": PATH, "QUERY_STRING": "", "wsgi.input": io.BytesIO()}
    return cast("Environ", fresh)  # the same keys as `environ`, less some of the optional ones


@dataclass(frozen=True)
class Snapshot:
    reply: Reply
    taken_at: float  # the clock when the refresh that made it began: its answer is no older than that


class HealthSnapshot:
    """The last answer to `GET /health` in this web process, refreshed at most one at a time.

    Every request is served on the event loop's one thread, so the refresh under way (`refreshing`, until it is done)
    is the lock: a request that finds one starts none, and those that must wait all wait for that one (shielded: a
    client that leaves does not cancel it for the others)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.latest: Snapshot | None = None
        self.refreshing: asyncio.Task[Snapshot] | None = None

    async def reply(self, refresh: Callable[[], Awaitable[Reply]]) -> Reply:
        """The answer for a request arriving now: the snapshot if it is younger than MAX_AGE_S, else the next one
        `refresh` (the view's answer, fresh) makes; a refresh is started if the snapshot is REFRESH_AFTER_S old."""
        arrived = self.clock()
        latest = self.latest
        if latest is None or arrived - latest.taken_at >= REFRESH_AFTER_S:
            self._refresh(refresh)
        while latest is None or arrived - latest.taken_at > MAX_AGE_S:
            # a refresh that began over MAX_AGE_S before this request came is too old too: then the next one
            latest = await asyncio.shield(self._refresh(refresh))
        return latest.reply

    def _refresh(self, refresh: Callable[[], Awaitable[Reply]]) -> asyncio.Task[Snapshot]:
        """The refresh under way, or a new one."""
        if self.refreshing is None or self.refreshing.done():
            self.refreshing = asyncio.ensure_future(self._take(refresh))
            self.refreshing.add_done_callback(_log_failure)
        return self.refreshing

    async def _take(self, refresh: Callable[[], Awaitable[Reply]]) -> Snapshot:
        taken_at = self.clock()
        self.latest = snapshot = Snapshot(await refresh(), taken_at)
        return snapshot


def _log_failure(refreshed: asyncio.Task) -> None:
    """A refresh that failed fails the requests waiting for it, if any, and is logged here either way (the snapshot
    it would have replaced stays, and the next request that finds that one old starts another)."""
    if not refreshed.cancelled() and refreshed.exception() is not None:
        log.error("health: the snapshot could not be refreshed", exc_info=refreshed.exception())
