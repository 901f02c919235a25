"""The arbiter service's refusals: a :class:`CallError` carries a :class:`Code`, and the
gRPC layer (:mod:`themis.arbiter.service`) answers with the status code of the same name.
The mechanism's own input errors (a malformed bid table) are :mod:`themis.mechanism.errors`."""

from __future__ import annotations

from enum import Enum


class Code(Enum):
    """Error classes; the gRPC layer maps them 1:1 onto status codes of the same name."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"  # a message beyond a size limit


class CallError(Exception):
    def __init__(self, code: Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
