"""Errors that jobs.actions raises; every adapter turns them into its own kind of answer."""


class BridgeError(Exception):
    """A request Bridge refuses, with a message meant for the caller and an HTTP status for REST."""

    http_status = 400

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class InvalidInput(BridgeError):
    http_status = 400


class Refused(BridgeError):
    http_status = 403


class NotFound(BridgeError):
    http_status = 404


class Conflict(BridgeError):
    http_status = 409


class QueueFull(BridgeError):
    http_status = 429
