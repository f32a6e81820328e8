"""A database that cannot take a request now is a JSON 503 with Retry-After on every interface Django serves (REST,
pages, the SSE stream's opening, admin), never an HTML 500: `database_busy` when it is busy, `storage_full` when the
disk that holds it is full. And every error Django itself answers (a bug in a view or a middleware, a body over
DATA_UPLOAD_MAX_MEMORY_SIZE, an unknown path) is JSON in the API's shape under /v1/ and for programs (`handler400`,
`handler404`, `handler500` in bridge/urls.py), and HTML only for a browser's pages.

Which failure is which is one rule, `jobs.core.resilience.temporary_refusal`: "busy" is no pooled connection free
within BRIDGE_DB_POOL_TIMEOUT_S (psycopg_pool's PoolTimeout), no PostgreSQL connection slot left ("too many clients")
or SQLite's write lock still taken ("database is locked"); "full" is SQLite's SQLITE_FULL, PostgreSQL's SQLSTATE 53100
or a file write's ENOSPC. The body is that refusal's `as_dict()`, the one the REST API's own handler (web/api.py) sends
too, since django-ninja answers its views' exceptions before any middleware sees them.

On SQLite a web request waits BRIDGE_DB_POOL_TIMEOUT_S for the write lock rather than the supervisors' 20 s, so a
burst is answered at once instead of piling up threads.
"""

import contextvars
import logging
import sys
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.signals import got_request_exception
from django.db.backends.signals import connection_created
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

from jobs.core.errors import BridgeError, ErrorCode
from jobs.core.resilience import temporary_refusal

log = logging.getLogger(__name__)

# True while a web request is being served in this context (asgiref carries it into the view's thread).
_in_web_request: contextvars.ContextVar[bool] = contextvars.ContextVar("bridge_in_web_request", default=False)
_BUSY_SEEN = "_bridge_database_busy"  # set on a request whose handling hit a busy database or a full disk somewhere


def database_busy_response(exc: BaseException) -> HttpResponse | None:
    """The answer to a database that cannot take the request now (JSON 503 `database_busy` or `storage_full`, with
    Retry-After), or None when `exc` is anything else."""
    refusal = temporary_refusal(exc)
    if refusal is None:
        return None
    log.warning("%s, answered 503: %s", refusal.code, exc)
    response = JsonResponse(refusal.as_dict(), status=refusal.http_status)
    response["Retry-After"] = str(refusal.retry_after_s)
    return response


class DatabaseBusyMiddleware:
    """Outermost. A view's exception is answered in `process_exception`; one raised by an inner middleware (a session
    saved after the view) has already become Django's 500 when it gets here, so that 500 is replaced. Busy or full,
    the same way."""

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = _in_web_request.set(True)
        try:
            return self._replace_busy_500(request, self.get_response(request))
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


def api_answers_json(get_response: Callable) -> Callable:
    """Under /v1/ every error is JSON in the API's shape: one Django or django-ninja answers as HTML or plain text
    (a 405 for a method a path does not take) is rewritten, keeping its status and its Allow header."""

    def answer(request: HttpRequest) -> HttpResponse:
        return as_json_error(request, get_response(request))

    return answer


# The code for an error Django or django-ninja answered without one, by its HTTP status.
_CODE_BY_STATUS: dict[int, ErrorCode] = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHENTICATED,
    403: ErrorCode.REFUSED,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    409: ErrorCode.CONFLICT,
    413: ErrorCode.TOO_LARGE,
    414: ErrorCode.URI_TOO_LONG,
    422: ErrorCode.INVALID_REQUEST,
    431: ErrorCode.HEADERS_TOO_LARGE,
}


def _code_for(reason: str, status: int) -> ErrorCode:
    """The code named by the reason phrase ("Method Not Allowed": method_not_allowed) when it is one, else the one
    for the status; any other status is internal_error (5xx) or bad_request."""
    try:
        return ErrorCode(reason.lower().replace(" ", "_"))
    except ValueError:
        pass
    if status in _CODE_BY_STATUS:
        return _CODE_BY_STATUS[status]
    return ErrorCode.INTERNAL_ERROR if status >= 500 else ErrorCode.BAD_REQUEST


def as_json_error(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """`response` as it is, unless it is an error under /v1/ in another shape than JSON: then that error as JSON."""
    if (
        response.status_code < 400
        or not request.path.startswith("/v1/")
        or response.get("Content-Type", "").startswith("application/json")
    ):
        return response
    reason = response.reason_phrase or "error"
    message = f"{reason.lower()}: {request.method} {request.path[:200]}"
    if response.has_header("Allow"):
        message += f" takes only {response['Allow']}"
    error = BridgeError(message, code=_code_for(reason, response.status_code), http_status=response.status_code)
    answer = JsonResponse(error.as_dict(), status=response.status_code)
    for header in ("Allow", "Retry-After", "WWW-Authenticate"):
        if response.has_header(header):
            answer[header] = response[header]
    return answer


def _remember_busy(sender: object, request: HttpRequest | None = None, **kwargs: object) -> None:
    """Django is turning an exception into a 500: note it on the request if it was a busy database or a full disk."""
    exc = sys.exc_info()[1]
    if request is not None and exc is not None and temporary_refusal(exc) is not None:
        setattr(request, _BUSY_SEEN, exc)


def _web_busy_timeout(sender: object, connection, **kwargs: object) -> None:
    """A SQLite connection opened for a web request waits BRIDGE_DB_POOL_TIMEOUT_S for the write lock, not 20 s."""
    if connection.vendor == "sqlite" and _in_web_request.get():
        milliseconds = int(settings.BRIDGE_DB_POOL_TIMEOUT_S * 1000)
        connection.connection.execute(f"PRAGMA busy_timeout = {milliseconds}")


got_request_exception.connect(_remember_busy, dispatch_uid="bridge-remember-database-busy")
connection_created.connect(_web_busy_timeout, dispatch_uid="bridge-web-busy-timeout")


# --- Django's own error answers, in the API's shape ---------------------------------------------------------------
def internal_error() -> JsonResponse:
    """The 500 for a bug: the caller learns nothing of it but that it happened and was logged."""
    error = BridgeError(
        "internal error: Bridge failed to answer this request; the details are in its log",
        code=ErrorCode.INTERNAL_ERROR,
    )
    return JsonResponse(error.as_dict(), status=500)


def too_large() -> JsonResponse:
    """The 413 for a body over DATA_UPLOAD_MAX_MEMORY_SIZE."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    error = BridgeError(
        f"the request body is over the limit of {limit} bytes (DATA_UPLOAD_MAX_MEMORY_SIZE): put long material in a "
        "file in the working directory and name it in the prompt",
        code=ErrorCode.TOO_LARGE,
        http_status=413,
        max_bytes=limit,
    )
    return JsonResponse(error.as_dict(), status=error.http_status)


def wants_json(request: HttpRequest) -> bool:
    """The REST API, MCP and every program get JSON; a browser asking for a page gets HTML."""
    path = request.path
    if path.startswith(("/v1/", "/mcp", "/health")):
        return True
    return "text/html" not in request.headers.get("Accept", "")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 400 (a request it could not read: a body too large, too many fields, a bad Host) and the 413."""
    if isinstance(exception, RequestDataTooBig):
        return too_large()
    if not wants_json(request):
        return defaults.bad_request(request, exception)
    error = BridgeError(f"the request cannot be read: {exception}", code=ErrorCode.BAD_REQUEST)
    return JsonResponse(error.as_dict(), status=400)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if not wants_json(request):
        return defaults.page_not_found(request, exception)
    error = BridgeError(
        f"no such path: {request.path[:200]} (the REST API is described at /v1/docs)",
        code=ErrorCode.NOT_FOUND,
        http_status=404,
    )
    return JsonResponse(error.as_dict(), status=404)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500, already logged with its traceback by the django.request logger (bridge/settings.py LOGGING)."""
    return internal_error() if wants_json(request) else defaults.server_error(request)
