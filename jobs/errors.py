"""Errors that jobs.actions raises; every adapter turns them into its own kind of answer in one place.

Each carries a message for people (what, why, what to do), an HTTP status for REST, a stable machine-readable
`code` that REST, MCP and websockets all show, and the data behind it (`detail`).
"""


class BridgeError(Exception):
    """A request Bridge refuses. `code` and `http_status` default to the class's; a raise site may be more precise."""

    http_status = 400
    code = "invalid_input"

    def __init__(self, message: str, *, code: str | None = None, http_status: int | None = None, **detail: object):
        super().__init__(message)
        self.message = message
        self.detail = detail
        if code is not None:
            self.code = code
        if http_status is not None:
            self.http_status = http_status

    def as_dict(self) -> dict:
        """The JSON body every adapter sends: {"error": message, "code": code, **detail}."""
        return {"error": self.message, "code": self.code, **self.detail}


class InvalidInput(BridgeError):
    http_status = 400
    code = "invalid_input"


class Unauthenticated(BridgeError):
    http_status = 401
    code = "unauthenticated"


class Refused(BridgeError):
    http_status = 403
    code = "refused"


class NotFound(BridgeError):
    http_status = 404
    code = "not_found"


class Conflict(BridgeError):
    http_status = 409
    code = "conflict"


class QueueFull(BridgeError):
    http_status = 429
    code = "queue_full"
