"""One error type for every refusal; each surface renders it in the format its clients parse."""

from __future__ import annotations


class ApiError(Exception):
    """A refusal with an HTTP status, a machine-readable code and a message a person can act on."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        retryable: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retryable = retryable
        self.headers = headers or {}
