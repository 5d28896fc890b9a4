"""Validating request bodies, and vLLM's 400 error shapes.

`parse_request(model_cls, body)` is the one entry point: it validates and turns a pydantic
`ValidationError` into `RequestValidationError` (a 400 whose message is vLLM's
"N validation error(s):" listing and whose `param` is the dotted location, e.g. `body.prompt`).
Errors vLLM raises *outside* pydantic (`VLLMValidationError` -> "msg (parameter=x, value=y)")
are built with `vllm_validation_error`.

Errors are listed in the model's `VLLM_FIELD_ORDER` (see `common.OpenAIBaseModel`): our
request models declare their shared fields once in a base class, so pydantic's own field
order is not vLLM's, and vLLM's listing (and hence `param`, the first error) follows its
field order.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from render_service.errors import BadRequestError

__all__ = [
    "RequestValidationError",
    "VLLMValidationError",
    "parse_request",
    "parse_union_request",
    "random_uuid",
    "request_validation_error",
    "sanitize_message",
    "vllm_validation_error",
]

_MAX_REPORTED_ERRORS = 10
_MAX_ERROR_INPUT_CHARS = 200
_MAX_ERROR_CHARS = 1000
_INTERNAL_LOC_MARKERS = frozenset(
    "function-wrap function-after function-before function-plain json-or-python "
    "lax-or-strict chain default nullable tagged-union union call arguments is-instance "
    "is-subclass callable str int float bool bytes bytearray list tuple dict set frozenset "
    "complex none nonetype".split()
)
_BRACKETED = re.compile(r"[\[\]{}()]")

ModelT = TypeVar("ModelT", bound=BaseModel)


def random_uuid() -> str:
    """16 hex chars, like vLLM's random_uuid."""
    return f"{uuid.uuid4().int & ((1 << 64) - 1):016x}"


class RequestValidationError(BadRequestError):
    """A body that failed schema validation; vLLM reports these with type "Bad Request"."""

    error_type = "Bad Request"


class VLLMValidationError(Exception):
    """Raised inside validators. Like vLLM's it is not a ValueError, so pydantic does not wrap
    it: it escapes validation and becomes a plain 400 "msg (parameter=x, value=y)"."""

    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None):
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        base = super().__str__()
        return f"{base} ({', '.join(extras)})" if extras else base


VLLMValidationError.__name__ = "VLLMValidationError"
VLLMValidationError.__qualname__ = "VLLMValidationError"


def vllm_validation_error(message: str, *, parameter: str | None = None, value: Any = None) -> BadRequestError:
    """The 400 vLLM returns for a VLLMValidationError raised while rendering."""
    text = str(VLLMValidationError(message, parameter=parameter, value=value))
    return BadRequestError(sanitize_message(text), param=parameter)


def sanitize_message(message: str) -> str:
    """vLLM's sanitize_message: drop memory addresses, tracebacks and file paths."""
    message = re.sub(r" at 0x[0-9a-fA-F]+>", ">", message)
    message = re.sub(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?', "", message)
    message = re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>", message)
    message = re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


def parse_request(model_cls: type[ModelT], body: Any) -> ModelT:
    """Validate a JSON body into `model_cls`, raising vLLM-shaped 400s.

    Raises:
        RequestValidationError: the body does not match the schema or a validator refused it.
    """
    try:
        return model_cls.model_validate(body)
    except ValidationError as exc:
        raise _to_request_validation_error(exc, model_cls) from None
    except VLLMValidationError as exc:
        raise BadRequestError(sanitize_message(str(exc)), param=exc.parameter) from None


def parse_union_request(members: tuple[type[BaseModel], ...], body: Any, *, first: type[BaseModel] | None = None) -> Any:
    """Validate `body` as vLLM's FastAPI does for a union body (e.g. TokenizeRequest).

    The first member that validates wins (`first` is tried before the others: the caller's
    cheap guess, e.g. the chat form when "messages" is present). When none does, the errors
    of every member are listed in declaration order, as pydantic's union does. vLLM's models
    carry a wrap validator, so no member name appears in the error locations.
    """
    order = sorted(members, key=lambda m: m is not first)
    failures: dict[type[BaseModel], ValidationError] = {}
    for member in order:
        try:
            return member.model_validate(body)
        except ValidationError as exc:
            failures[member] = exc
        except VLLMValidationError as exc:
            raise BadRequestError(sanitize_message(str(exc)), param=exc.parameter) from None
    errors = [err for member in members for err in _body_errors(failures[member], member)]
    raise request_validation_error(errors) from None


def _to_request_validation_error(exc: ValidationError, model_cls: type[BaseModel]) -> RequestValidationError:
    return request_validation_error(_body_errors(exc, model_cls))


def _body_errors(exc: ValidationError, model_cls: type[BaseModel]) -> list[dict[str, Any] | str]:
    """pydantic's errors in vLLM's field order, located under "body"."""
    errors = exc.errors(include_url=False)
    order: tuple[str, ...] = getattr(model_cls, "VLLM_FIELD_ORDER", ())
    if order:
        rank = {name: position for position, name in enumerate(order)}
        # Stable: errors of one field keep pydantic's order; loc-less ones stay first.
        errors = sorted(errors, key=lambda err: rank.get(str(err["loc"][0]), -1) if err["loc"] else -1)
    return [{**err, "loc": ("body", *err.get("loc", ()))} for err in errors]


def request_validation_error(errors: list[dict[str, Any] | str]) -> RequestValidationError:
    """vLLM's 400 for FastAPI request-validation errors (`loc` already starts with "body").

    An entry may be a bare string (vLLM raises the content-type check that way): it is listed
    as is and gives no `param`.
    """
    param = None
    for err in errors:
        ctx_error = (err.get("ctx") or {}).get("error") if isinstance(err, dict) else None
        if isinstance(ctx_error, VLLMValidationError):
            param = ctx_error.parameter
            break
    if param is None and errors and isinstance(errors[0], dict) and errors[0].get("loc"):
        param = _clean_loc(tuple(errors[0]["loc"]))
    label = "error" if len(errors) == 1 else "errors"
    message = f"{len(errors)} validation {label}:\n"
    message += "".join(f"  {_format_error(err)}\n" for err in errors[:_MAX_REPORTED_ERRORS])
    if len(errors) > _MAX_REPORTED_ERRORS:
        message += f"  ...and {len(errors) - _MAX_REPORTED_ERRORS} more {label}\n"
    return RequestValidationError(sanitize_message(message.rstrip()), param=param)


def _clean_loc(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if not _is_internal(str(p))]
    return ".".join(parts) if parts else ".".join(str(p) for p in loc)


def _is_internal(segment: str) -> bool:
    return bool(_BRACKETED.search(segment)) or segment.lower() in _INTERNAL_LOC_MARKERS


def _summarize(value: Any) -> Any:
    if isinstance(value, str):
        if len(value) > _MAX_ERROR_INPUT_CHARS:
            return value[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]"
        return value
    if isinstance(value, (bytes, bytearray)):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = str(value)
    except ValueError:
        return f"<{type(value).__name__}>"
    return text[:_MAX_ERROR_INPUT_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_INPUT_CHARS else text


def _format_error(err: dict[str, Any] | str) -> str:
    if not isinstance(err, dict):
        return str(err)
    err = dict(err)
    if "input" in err:
        err["input"] = _summarize(err["input"])
    err["loc"] = _clean_loc(tuple(err["loc"]))
    text = str(err)
    return text[:_MAX_ERROR_CHARS] + "...[truncated]" if len(text) > _MAX_ERROR_CHARS else text


