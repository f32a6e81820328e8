"""A busy database is a JSON 503 with Retry-After on every interface Django serves (REST, pages, the SSE stream's
opening, admin), never an HTML 500.

"Busy" is what `jobs.errors.is_database_busy` recognises: no pooled connection came free within
BRIDGE_DB_POOL_TIMEOUT_S (psycopg_pool's PoolTimeout), PostgreSQL had no connection slot left ("too many clients"), or
SQLite's write lock stayed taken ("database is locked"). The body is `DatabaseBusy.as_dict()`, the one the REST API's
own handler (jobs/api.py) sends too, since django-ninja answers its views' exceptions before any middleware sees them.

On SQLite a web request waits BRIDGE_DB_POOL_TIMEOUT_S for the write lock rather than the supervisors' 20 s, so a
burst is answered at once instead of piling up threads.
"""

import contextvars
import logging
import sys
from collections.abc import Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.signals import got_request_exception
from django.db.backends.signals import connection_created
from django.http import HttpRequest, HttpResponse, JsonResponse

from jobs.errors import DatabaseBusy, is_database_busy

log = logging.getLogger(__name__)

# True while a web request is being served in this context (asgiref carries it into the view's thread).
_in_web_request: contextvars.ContextVar[bool] = contextvars.ContextVar("bridge_in_web_request", default=False)
_BUSY_SEEN = "_bridge_database_busy"  # set on a request whose handling hit a busy database somewhere


def database_busy_response(exc: BaseException) -> HttpResponse | None:
    """The answer to a busy database (JSON 503, Retry-After), or None when `exc` is anything else."""
    if not is_database_busy(exc):
        return None
    busy = DatabaseBusy(settings.BRIDGE_DB_RETRY_AFTER_S)
    log.warning("database busy, answered 503: %s", exc)
    response = JsonResponse(busy.as_dict(), status=busy.http_status)
    response["Retry-After"] = str(busy.retry_after_s)
    return response


class DatabaseBusyMiddleware:
    """Outermost. A view's exception is answered in `process_exception`; one raised by an inner middleware (a session
    saved after the view) has already become Django's 500 when it gets here, so that 500 is replaced."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        if iscoroutinefunction(get_response):
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if iscoroutinefunction(self):
            return self.__acall__(request)
        token = _in_web_request.set(True)
        try:
            return self._replace_busy_500(request, self.get_response(request))
        finally:
            _in_web_request.reset(token)

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        token = _in_web_request.set(True)
        try:
            return self._replace_busy_500(request, await self.get_response(request))
        finally:
            _in_web_request.reset(token)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return database_busy_response(exception)

    @staticmethod
    def _replace_busy_500(request: HttpRequest, response: HttpResponse) -> HttpResponse:
        busy = getattr(request, _BUSY_SEEN, None)
        if response.status_code == 500 and busy is not None:
            return database_busy_response(busy) or response
        return response


def _remember_busy(sender: object, request: HttpRequest | None = None, **kwargs: object) -> None:
    """Django is turning an exception into a 500: note it on the request if it was a busy database."""
    exc = sys.exc_info()[1]
    if request is not None and exc is not None and is_database_busy(exc):
        setattr(request, _BUSY_SEEN, exc)


def _web_busy_timeout(sender: object, connection, **kwargs: object) -> None:
    """A SQLite connection opened for a web request waits BRIDGE_DB_POOL_TIMEOUT_S for the write lock, not 20 s."""
    if connection.vendor == "sqlite" and _in_web_request.get():
        milliseconds = int(settings.BRIDGE_DB_POOL_TIMEOUT_S * 1000)
        connection.connection.execute(f"PRAGMA busy_timeout = {milliseconds}")


got_request_exception.connect(_remember_busy, dispatch_uid="bridge-remember-database-busy")
connection_created.connect(_web_busy_timeout, dispatch_uid="bridge-web-busy-timeout")
