"""The one error tree of render-service, mapped to HTTP in `render_service.http.errors`.

    RenderServiceError (status 500, "InternalServerError")
    ├── BadRequestError (400, "BadRequestError")      bad input, validation, bad templates
    │   ├── StreamStateError                           forged, stale, foreign or corrupt stream_state
    │   └── ConfigMismatchError                        render/derender fingerprint mismatch
    ├── UnauthorizedError (401)                        missing or wrong API key
    ├── NotFoundError (404, "NotFoundError")           unknown model
    ├── PayloadTooLargeError (413)                     body over the configured limit
    ├── NotImplementedFeatureError (501)
    ├── ServiceUnavailableError (503)                  saturated, no healthy engine
    ├── EngineError (502, "BadGatewayError")           an engine failed or answered garbage
    │   └── EngineTimeoutError (504)
    └── ConfigError (startup only; never reaches HTTP)

Every error carries the OpenAI error body fields (`type`, `param`) and its status. The core
(render, derender, parsers adapters) raises these; only the HTTP layer turns them into bodies.
"""

from __future__ import annotations

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
    "EngineError",
    "EngineTimeoutError",
    "ConfigError",
]


class RenderServiceError(Exception):
    status: int = 500
    error_type: str = "InternalServerError"

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


class EngineError(RenderServiceError):
    status = 502
    error_type = "BadGatewayError"


class EngineTimeoutError(EngineError):
    status = 504
    error_type = "GatewayTimeoutError"


class ConfigError(RenderServiceError):
    """Bad flags or model folder; raised at startup, reported by the CLI."""
