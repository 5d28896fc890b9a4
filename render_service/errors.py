"""The one error tree of render-service, mapped to HTTP in `render_service.http.errors`.

    RenderServiceError (status 500, "InternalServerError")
    ├── BadRequestError (400, "BadRequestError")      bad input, validation, bad templates
    │   ├── StreamStateError                           forged, stale, foreign or corrupt stream_state
    │   └── ConfigMismatchError                        render/derender fingerprint mismatch
    ├── UnauthorizedError (401)                        missing or wrong API key
    ├── NotFoundError (404, "NotFoundError")           unknown model
    ├── PayloadTooLargeError (413)                     body over the configured limit
    ├── NotImplementedFeatureError (501)
    ├── ServiceUnavailableError (503)                  no healthy engine
    │   └── SaturatedError                             too many requests in flight (Retry-After)
    ├── EngineError (502, "BadGatewayError")           an engine failed or answered garbage
    │   └── EngineTimeoutError (504)
    └── ConfigError (startup only; never reaches HTTP)

Every error carries the OpenAI error body fields (`type`, `param`), its status and the
response headers it needs; only the HTTP layer turns them into responses. The gateway reads
three more class attributes instead of testing types: `metric_cause` (the cause label of
`render_service_gateway_errors_total`), `retryable` (safe to send to another engine if no token
reached the client) and `reached_engine` (False: the request was provably never sent, so
there is nothing to abort). The engine-side subclasses are in `render_service.gateway.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar

__all__ = [
    "RenderServiceError",
    "BadRequestError",
    "StreamStateError",
    "ConfigMismatchError",
    "UnauthorizedError",
    "NotFoundError",
    "PayloadTooLargeError",
    "NotImplementedFeatureError",
    "ServiceUnavailableError",
    "SaturatedError",
    "EngineError",
    "EngineTimeoutError",
    "ConfigError",
]


class RenderServiceError(Exception):
    status: int = 500
    error_type: str = "InternalServerError"
    headers: ClassVar[Mapping[str, str]] = MappingProxyType({})
    metric_cause: ClassVar[str] = "other"
    retryable: ClassVar[bool] = False
    reached_engine: ClassVar[bool] = True

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def to_body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.status,
            }
        }


class BadRequestError(RenderServiceError):
    status = 400
    error_type = "BadRequestError"


class StreamStateError(BadRequestError):
    """The echoed stream_state cannot be trusted or decoded."""


class ConfigMismatchError(BadRequestError):
    """The request was rendered by a server with other model/template/parser settings."""


class UnauthorizedError(RenderServiceError):
    status = 401
    error_type = "Unauthorized"


class NotFoundError(RenderServiceError):
    status = 404
    error_type = "NotFoundError"


class PayloadTooLargeError(RenderServiceError):
    status = 413
    error_type = "PayloadTooLargeError"


class NotImplementedFeatureError(RenderServiceError):
    status = 501
    error_type = "NotImplementedError"


class ServiceUnavailableError(RenderServiceError):
    status = 503
    error_type = "ServiceUnavailableError"


class SaturatedError(ServiceUnavailableError):
    """Too many requests in flight (a worker's or the gateway's bound); retry in a second."""

    headers = MappingProxyType({"retry-after": "1"})


class EngineError(RenderServiceError):
    status = 502
    error_type = "BadGatewayError"


class EngineTimeoutError(EngineError):
    status = 504
    error_type = "GatewayTimeoutError"
    metric_cause = "timeout"
    retryable = True


class ConfigError(RenderServiceError):
    """Bad flags or model folder; raised at startup, reported by the CLI."""
