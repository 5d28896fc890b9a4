"""Request bodies in, JSON responses out: the HTTP helpers both apps (render, gateway) share.

Reading a body reproduces what vLLM 0.33's FastAPI routes do before a handler runs, in the
same order, so malformed input gets vLLM's exact 400 body:

1. A body whose content type FastAPI treats as JSON (`application/json`, `application/*+json`,
   parameters and case ignored) is decoded first: undecodable JSON is a `json_invalid` error
   at `body.<char offset>` (Python's `json` message); any other decoding failure (bad UTF-8,
   nesting too deep) is "There was an error parsing the body" (vLLM answers that one with
   FastAPI's bare `{"detail": ...}`; we keep the OpenAI error shape, same status).
2. Then vLLM's `validate_json_request`: the media type, lower-cased and cut at the first ";"
   but not stripped, must be exactly `application/json` ("Unsupported Media Type").
3. An empty body or JSON `null` is a `missing` error at `body`.
4. A body that is not an object fails each member of the route's body model with
   `model_attributes_type` (one error per union member: see `read_json_object`).

orjson decodes on the hot path; the stdlib parser (what vLLM uses) runs only when orjson
refuses, so the result and the error text are always the stdlib's (NaN, UTF-16 bodies and
integers above 64 bits are accepted, as by vLLM).

`read_lazy_object` is the streaming derender's reader: the body's syntax is checked whole, but
the values of named keys (the prompt and request a vLLM client resends with every chunk) are
decoded only if asked for. Anything unusual falls back to `read_json_object`, so errors are
the same.
"""

from __future__ import annotations

import email.message
import functools
import json
from typing import Any

import msgspec
import orjson
from fastapi import Request
from starlette.responses import Response

from render_service import __version__, jsonio
from render_service.protocol import RequestValidationError, request_validation_error

__all__ = [
    "SINGLE_MODEL_BODY",
    "VLLM_API_VERSION",
    "LazyObject",
    "json_response",
    "read_json_body",
    "read_json_object",
    "read_lazy_object",
    "version_body",
]

# The vLLM release whose wire format this service speaks (reported by GET /version).
VLLM_API_VERSION = "0.33.0"
# Body model of a route: the `loc` suffix under "body" of each union member's top-level
# error. A plain model is one member with no suffix; see read_json_object.
SINGLE_MODEL_BODY: tuple[tuple[str, ...], ...] = ((),)
_UNSUPPORTED_MEDIA_TYPE = "Unsupported Media Type: Only 'application/json' is allowed"
_NOT_AN_OBJECT = "Input should be a valid dictionary or object to extract fields from"


def version_body() -> dict[str, str]:
    """GET /version: vLLM's `{"version": ...}` is the API version clients gate features on."""
    return {"version": VLLM_API_VERSION, "render_service_version": __version__}


async def read_json_body(request: Request) -> Any:
    """The decoded JSON body (any JSON value but null), or vLLM's 400 for steps 1-3 above."""
    raw = await request.body()
    content_type = request.headers.get("content-type")
    body = _decode(raw) if raw and _declares_json(content_type) else None
    if (content_type or "").lower().split(";", 1)[0] != "application/json":
        raise request_validation_error([_UNSUPPORTED_MEDIA_TYPE])
    if body is None:
        raise request_validation_error([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
    return body


async def read_json_object(
    request: Request, members: tuple[tuple[str, ...], ...] = SINGLE_MODEL_BODY
) -> dict[str, Any]:
    """The body as a JSON object, for routes whose core needs a dict.

    `members`: per member of the route's body model (a pydantic union in vLLM), the location
    pydantic reports it at, e.g. `(("DerenderChatRequest",), ("DerenderChatStreamRequest",))`
    ; vLLM request models hide the member name behind a wrap validator, which is `()`.
    """
    body = await read_json_body(request)
    if not isinstance(body, dict):
        raise request_validation_error(
            [
                {"type": "model_attributes_type", "loc": ("body", *suffix), "msg": _NOT_AN_OBJECT, "input": body}
                for suffix in members
            ]
        )
    return body


class LazyObject:
    """A JSON object body whose `deferred` keys are decoded only by `full()`."""

    __slots__ = ("head", "whole", "_raw", "_full")

    def __init__(
        self, head: dict[str, Any], raw: bytes | None, full: dict[str, Any] | None, *, whole: bool = False
    ) -> None:
        self.head = head  # every key but the deferred ones, decoded (all of them if `whole`)
        self.whole = whole  # a small body, decoded whole: deferring would save nothing
        self._raw = raw
        self._full = full

    def full(self) -> dict[str, Any]:
        if self._full is None:
            assert self._raw is not None
            self._full = _decode(self._raw)  # syntax already checked: an object
        return self._full


_SPANS = msgspec.json.Decoder(dict[str, msgspec.Raw])
# Bodies up to this size are decoded whole (a lean protocol chunk is ~1 KB): one orjson pass
# is cheaper than spans plus per-value decodes, or a search for the deferred keys.
_DECODE_WHOLE_BYTES = 16 * 1024


async def read_lazy_object(
    request: Request, members: tuple[tuple[str, ...], ...], deferred: frozenset[str]
) -> LazyObject:
    raw = await request.body()
    if len(raw) <= _DECODE_WHOLE_BYTES:
        body = await read_json_object(request, members)
        return LazyObject(body, None, body, whole=True)
    if _declares_json_exactly(request.headers.get("content-type")) and (raw.isascii() or _utf8(raw)):
        head = _head(raw, deferred)
        if head is not None:
            return LazyObject(head, raw, None)
    body = await read_json_object(request, members)  # the exact errors, or an unusual body
    return LazyObject({k: v for k, v in body.items() if k not in deferred}, None, body)


def _head(raw: bytes, deferred: frozenset[str]) -> dict[str, Any] | None:
    """The non-deferred values of an object body, or None when it takes the full path."""
    try:
        spans = _SPANS.decode(raw)  # checks the whole body's syntax; values stay bytes
        return {k: orjson.loads(memoryview(v)) for k, v in spans.items() if k not in deferred}
    except (msgspec.DecodeError, msgspec.ValidationError, orjson.JSONDecodeError):
        return None  # not an object, NaN, a 65-bit integer...: decode it as vLLM would


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _declares_json_exactly(content_type: str | None) -> bool:
    return (content_type or "").lower().split(";", 1)[0] == "application/json"


def json_response(data: Any, status: int = 200) -> Response:
    return Response(
        jsonio.dumps(data, option=orjson.OPT_NON_STR_KEYS), status, media_type="application/json"
    )


@functools.lru_cache(maxsize=256)  # parsing the header as an email message is ~10 us per request
def _declares_json(content_type: str | None) -> bool:
    """FastAPI decodes JSON only for a JSON media type (parsed like an email header)."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


def _decode(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass  # orjson is stricter than vLLM's parser: let the stdlib decide (and word the error)
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error", "input": {},
                 "ctx": {"error": exc.msg}}  # fmt: skip
        raise request_validation_error([error]) from None
    except (ValueError, RecursionError) as exc:  # bad UTF-8, too deep, an int of > 4300 digits
        raise RequestValidationError("There was an error parsing the body") from exc
