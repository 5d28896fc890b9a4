"""Engine-side failures, as subclasses of the service's one error tree.

    EngineError (502)                          render_service.errors
    ├── EngineUnavailableError     retryable   connection reset, stream cut without [DONE]
    │   └── EngineUnreachableError retryable   connect refused / connect timeout: never sent
    ├── EngineFailedError          retryable   engine 5xx, or an SSE error event (e.g. KV load failure)
    ├── EngineAuthError            final       engine 401/403: the gateway's --engine-api-key is wrong
    └── EngineTimeoutError (504)   retryable   a first-token or prefill deadline passed
        └── RequestDeadlineError   final       a whole non-streaming decode ran past timeouts.request_s
    BadRequestError (400)
    └── EngineRejectedError        final       engine 4xx: the request itself is wrong; its status kept

Each class says so itself (`retryable`, `metric_cause`, `reached_engine`; see
render_service.errors). "Retryable" means: safe to send again *if no token reached the client yet*. The stages decide
whether that holds; these classes only say what kind of failure it was. A request that ran
into its whole-request deadline is not sent again: the engine spent that long on it already,
and a second try would double the client's wait. `EngineUnreachableError` also tells the
decode stage that the engine never saw the request, so a P/D decode may reuse the prefill's
KV on another engine (see stages.DecodeStage).
"""

from __future__ import annotations

from render_service.errors import (
    BadRequestError,
    EngineError,
    EngineTimeoutError,
    RenderServiceError,
)

__all__ = [
    "EngineError",
    "EngineUnavailableError",
    "EngineUnreachableError",
    "EngineFailedError",
    "EngineAuthError",
    "EngineTimeoutError",
    "RequestDeadlineError",
    "EngineRejectedError",
]


class EngineUnavailableError(EngineError):
    """The engine could not be reached, or dropped the connection."""

    metric_cause = "unavailable"
    retryable = True


class EngineUnreachableError(EngineUnavailableError):
    """The connection to the engine could not be opened: the request was never sent."""

    reached_engine = False


class EngineFailedError(EngineError):
    """The engine answered with a server error."""

    metric_cause = "engine_error"
    retryable = True


class EngineAuthError(EngineError):
    """The engine refused the gateway's credentials (a gateway configuration problem)."""

    metric_cause = "engine_auth"


class RequestDeadlineError(EngineTimeoutError):
    """A whole non-streaming decode took longer than its deadline."""

    metric_cause = "deadline"
    retryable = False


class EngineRejectedError(BadRequestError):
    """The engine refused the request (4xx); relayed to the client with the engine's status."""

    metric_cause = "rejected"

    def __init__(self, message: str, *, status: int, error_type: str | None = None,
                 param: str | None = None) -> None:
        super().__init__(message, param=param)
        self.status = status
        if error_type:
            self.error_type = error_type


def error_from_status(status: int, body: object, what: str) -> RenderServiceError:
    """Map an engine's non-200 answer (vLLM ErrorResponse or anything else) to our tree."""
    message, error_type, param = f"{what}: engine answered HTTP {status}", None, None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        message = str(err.get("message") or message)
        error_type = err.get("type") if isinstance(err.get("type"), str) else None
        param = err.get("param") if isinstance(err.get("param"), str) else None
    if status in (401, 403):
        # vLLM's --api-key answers {"error": "Unauthorized"}: the client's request is fine.
        return EngineAuthError(f"{what} refused the gateway's credentials (HTTP {status}); "
                               "check --engine-api-key")
    if 400 <= status < 500:
        return EngineRejectedError(message, status=status, error_type=error_type, param=param)
    return EngineFailedError(f"{what}: {message}")
