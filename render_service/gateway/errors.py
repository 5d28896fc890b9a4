"""Engine-side failures, as subclasses of the service's one error tree.

    EngineError (502)                       render_service.errors
    ├── EngineUnavailableError   retryable  connect refused/reset, stream cut without [DONE]
    ├── EngineFailedError        retryable  engine 5xx, or an SSE error event (e.g. KV load failure)
    └── EngineTimeoutError (504) retryable  a phase deadline passed (render_service.errors)
    BadRequestError (400)
    └── EngineRejectedError      final      engine 4xx: the request itself is wrong; its status kept

"Retryable" means: safe to send again *if no token reached the client yet*. The stages decide
whether that holds; these classes only say what kind of failure it was.
"""

from __future__ import annotations

from render_service.errors import BadRequestError, EngineError, EngineTimeoutError, RenderServiceError

__all__ = [
    "EngineUnavailableError",
    "EngineFailedError",
    "EngineTimeoutError",
    "EngineRejectedError",
    "is_retryable",
]


class EngineUnavailableError(EngineError):
    """The engine could not be reached, or dropped the connection."""


class EngineFailedError(EngineError):
    """The engine answered with a server error."""


class EngineRejectedError(BadRequestError):
    """The engine refused the request (4xx); relayed to the client with the engine's status."""

    def __init__(self, message: str, *, status: int, error_type: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status
        if error_type:
            self.error_type = error_type


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (EngineUnavailableError, EngineFailedError, EngineTimeoutError))


def error_from_status(status: int, body: object, what: str) -> RenderServiceError:
    """Map an engine's non-200 answer (vLLM ErrorResponse or anything else) to our tree."""
    message, error_type, param = f"{what}: engine answered HTTP {status}", None, None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        message = str(err.get("message") or message)
        error_type = err.get("type") if isinstance(err.get("type"), str) else None
        param = err.get("param") if isinstance(err.get("param"), str) else None
    if 400 <= status < 500:
        return EngineRejectedError(message, status=status, error_type=error_type, param=param)
    return EngineFailedError(f"{what}: {message}")
