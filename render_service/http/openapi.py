"""The app's OpenAPI document: request and response schemas for routes that read raw JSON.

The routes parse bodies with orjson and validate them in the core (`render_service.protocol`,
`render_service.derender.schemas`) for speed, so FastAPI sees no body parameter and would
publish operations without request schemas. This module documents them after the fact:

- request bodies: the JSON Schema (validation mode) of the same pydantic models the core
  validates with, so the document cannot drift from what is accepted;
- responses: hand-written schemas of the JSON the core returns (the core builds plain dicts),
  kept loose where vLLM's shapes are open (sampling params, parse context) and strict where a
  client relies on them (ids, token lists, the error body);
- errors: 400 / 404 / 413 / 501 / 503 with the OpenAI error body, and 401 (`{"error":
  "Unauthorized"}`, vLLM's shape) plus a bearer security scheme when `--api-key` is set.

Nothing here runs per request: the document is built once, on the first `/openapi.json`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from render_service.derender.schemas import (
    ChatBatchBody,
    ChatStreamBody,
    CompletionBatchBody,
    CompletionStreamBody,
)
from render_service.http.middleware import OPEN_PATHS
from render_service.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
)
from render_service.protocol.anthropic import AnthropicMessagesRequest
from render_service.protocol.responses import ResponsesRequest

__all__ = ["install_openapi", "build_openapi", "ERROR_STATUSES"]

_REF = "#/components/schemas/{model}"
_JSON = "application/json"

# Routes whose bodies are documented, with the models (any of) that validate them.
_REQUEST_MODELS: dict[str, tuple[type[BaseModel], ...]] = {
    "/v1/chat/completions/render": (ChatCompletionRequest,),
    "/v1/completions/render": (CompletionRequest,),
    "/v1/messages/render": (AnthropicMessagesRequest,),
    "/v1/responses/render": (ResponsesRequest,),
    "/v1/chat/completions/derender": (ChatBatchBody, ChatStreamBody),
    "/v1/completions/derender": (CompletionBatchBody, CompletionStreamBody),
    "/tokenize": (TokenizeCompletionRequest, TokenizeChatRequest),
    "/detokenize": (DetokenizeRequest,),
}

# Status -> description of the OpenAI error body answers every JSON route may give.
ERROR_STATUSES = {
    400: "Bad request: malformed JSON, schema or vLLM validation failure, template error or "
    "template limit, prompt longer than max_model_len, invalid stream_state",
    404: "Unknown model name",
    413: "Request body larger than --max-body-bytes",
    501: "A feature vLLM supports that this render service does not (named in the message)",
    503: "Worker saturated (--max-concurrent-requests in flight); retry after Retry-After",
}

_NULLABLE_OBJECT = {"type": ["object", "null"]}
_TOKEN_IDS = {"type": "array", "items": {"type": "integer", "minimum": 0}}

ERROR_RESPONSE = {
    "title": "ErrorResponse",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": "integer"},
            },
        }
    },
}

UNAUTHORIZED_RESPONSE = {
    "title": "UnauthorizedResponse",
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"const": "Unauthorized"}},
}

GENERATE_REQUEST = {
    "title": "GenerateRequest",
    "type": "object",
    "required": ["request_id", "token_ids", "sampling_params", "model", "output_mode", "stream", "priority"],
    "properties": {
        "request_id": {"type": "string", "minLength": 1},
        "token_ids": _TOKEN_IDS,
        "token_offsets": {"type": ["array", "null"]},
        "features": {},
        "content_parts": {},
        "sampling_params": {
            "type": "object",
            "properties": {
                "max_tokens": {"type": "integer", "minimum": 1},
                "stop": {"type": "array", "items": {"type": "string"}},
                "stop_token_ids": _TOKEN_IDS,
            },
        },
        "model": {"type": ["string", "null"]},
        "reasoning_ended": {"type": ["boolean", "null"]},
        "reasoning_parser_kwargs": _NULLABLE_OBJECT,
        "return_token_ids": {"type": ["boolean", "null"]},
        "output_mode": {"const": "tokens"},
        "parse_context": _NULLABLE_OBJECT,
        "stream": {"type": "boolean"},
        "stream_options": _NULLABLE_OBJECT,
        "cache_salt": {"type": ["string", "null"]},
        "priority": {"type": "integer"},
        "kv_transfer_params": _NULLABLE_OBJECT,
        "ec_transfer_params": _NULLABLE_OBJECT,
    },
}

_USAGE = {
    "type": ["object", "null"],
    "properties": {
        "prompt_tokens": {"type": "integer", "minimum": 0},
        "completion_tokens": {"type": ["integer", "null"], "minimum": 0},
        "total_tokens": {"type": "integer", "minimum": 0},
    },
}
_TOOL_CALL = {
    "type": "object",
    "properties": {
        "id": {"type": ["string", "null"]},
        "type": {"type": ["string", "null"]},
        "index": {"type": "integer", "minimum": 0},
        "function": {
            "type": ["object", "null"],
            "properties": {"name": {"type": ["string", "null"]}, "arguments": {"type": ["string", "null"]}},
        },
    },
}
_TEXT_FIELDS = {
    "role": {"type": ["string", "null"]},
    "content": {"type": ["string", "null"]},
    "reasoning": {"type": ["string", "null"]},
    "tool_calls": {"type": "array", "items": _TOOL_CALL},
}
_CHOICE_COMMON = {
    "index": {"type": "integer", "minimum": 0},
    "finish_reason": {"type": ["string", "null"]},
    "stop_reason": {"type": ["integer", "string", "null"]},
    "token_ids": {"type": ["array", "null"], "items": {"type": "integer", "minimum": 0}},
    "logprobs": _NULLABLE_OBJECT,
}


def _completion_object(kind: str, choice_props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["id", "object", "created", "model", "choices"],
        "properties": {
            "id": {"type": "string"},
            "object": {"const": kind},
            "created": {"type": "integer"},
            "model": {"type": "string"},
            "choices": {
                "type": "array",
                "items": {"type": "object", "required": required, "properties": choice_props},
            },
            "usage": _USAGE,
        },
    }


CHAT_COMPLETION = {
    "title": "ChatCompletionResponse",
    **_completion_object(
        "chat.completion",
        {**_CHOICE_COMMON, "message": {"type": "object", "required": ["role"], "properties": _TEXT_FIELDS}},
        ["index", "message", "finish_reason"],
    ),
}
CHAT_CHUNK = _completion_object(
    "chat.completion.chunk",
    {**_CHOICE_COMMON, "delta": {"type": "object", "properties": _TEXT_FIELDS}},
    ["index", "delta", "finish_reason"],
)
TEXT_COMPLETION = {
    "title": "CompletionResponse",
    **_completion_object(
        "text_completion", {**_CHOICE_COMMON, "text": {"type": "string"}}, ["index", "text", "finish_reason"]
    ),
}
TEXT_CHUNK = _completion_object(
    "text_completion", {**_CHOICE_COMMON, "text": {"type": "string"}}, ["index", "text", "finish_reason"]
)


def _stream_step(chunk: dict[str, Any], title: str) -> dict[str, Any]:
    return {
        "title": title,
        "type": "object",
        "required": ["chunk", "stream_state"],
        "properties": {
            "chunk": chunk,
            # Opaque, signed: {"rs": "<version>.<payload>.<mac>"}; echo it unchanged.
            "stream_state": {
                "anyOf": [
                    {"type": "object", "required": ["rs"], "properties": {"rs": {"type": "string"}}},
                    {"type": "null"},
                ]
            },
            "abort_engine_request": {"type": "boolean"},
        },
    }


TOKENIZE_RESPONSE = {
    "title": "TokenizeResponse",
    "type": "object",
    "required": ["count", "max_model_len", "tokens"],
    "properties": {
        "count": {"type": "integer", "minimum": 0},
        "max_model_len": {"type": "integer", "minimum": 1},
        "tokens": _TOKEN_IDS,
        "token_strs": {"type": ["array", "null"], "items": {"type": "string"}},
    },
}
DETOKENIZE_RESPONSE = {
    "title": "DetokenizeResponse",
    "type": "object",
    "required": ["prompt"],
    "properties": {"prompt": {"type": "string"}},
}
MODEL_LIST = {
    "title": "ModelList",
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "object", "max_model_len"],
                "properties": {
                    "id": {"type": "string"},
                    "object": {"const": "model"},
                    "max_model_len": {"type": "integer", "minimum": 1},
                },
            },
        },
    },
}
VERSION = {
    "title": "VersionResponse",
    "type": "object",
    "required": ["version", "render_service_version"],
    "properties": {
        "version": {"type": "string", "description": "the vLLM API version served (vLLM's own field)"},
        "render_service_version": {"type": "string"},
    },
}
LOAD = {
    "title": "LoadResponse",
    "type": "object",
    "required": ["server_load"],
    "properties": {"server_load": {"type": "integer", "minimum": 0}},
}

_SUCCESS: dict[str, tuple[str, dict[str, Any]]] = {
    "/v1/chat/completions/render": ("The engine request (GenerateRequest)", GENERATE_REQUEST),
    "/v1/responses/render": ("The engine request of the Responses request (GenerateRequest)", GENERATE_REQUEST),
    "/v1/messages/render": ("The engine request of the converted chat request (GenerateRequest)", GENERATE_REQUEST),
    "/v1/completions/render": (
        "One GenerateRequest per prompt",
        {"title": "GenerateRequestList", "type": "array", "items": GENERATE_REQUEST},
    ),
    "/v1/chat/completions/derender": (
        "Batch: a chat.completion; stream (`stream: true`): one chunk and the next stream_state",
        {"anyOf": [CHAT_COMPLETION, _stream_step(CHAT_CHUNK, "ChatStreamStep")]},
    ),
    "/v1/completions/derender": (
        "Batch: a text_completion; stream (`stream: true`): one chunk and the next stream_state",
        {"anyOf": [TEXT_COMPLETION, _stream_step(TEXT_CHUNK, "CompletionStreamStep")]},
    ),
    "/tokenize": ("Token ids of the prompt or rendered conversation", TOKENIZE_RESPONSE),
    "/detokenize": ("The decoded text", DETOKENIZE_RESPONSE),
    "/v1/models": ("Served model names", MODEL_LIST),
    "/version": ("Service and vLLM API versions", VERSION),
    "/load": ("Requests queued on the render pool", LOAD),
}
_EMPTY_OK = {"/health": "Process is up", "/ping": "Process is up",
             "/kv_event_sources": "KV-event publishers of the engines: {} on a render server"}


# The core validates messages loosely (objects with a string role) and normalises them later;
# the document states the OpenAI shape clients should send.
_CONTENT_PART = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string"}, "text": {"type": "string"}},
}
CHAT_MESSAGE = {
    "title": "ChatMessage",
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": _CONTENT_PART}, {"type": "null"}]},
        "name": {"type": "string"},
        "reasoning": {"type": ["string", "null"]},
        "tool_call_id": {"type": "string"},
        "tool_calls": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "type", "function"],
                "properties": {
                    "id": {"type": "string"},
                    "type": {"const": "function"},
                    "function": {
                        "type": "object",
                        "required": ["name", "arguments"],
                        "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
                    },
                },
            },
        },
    },
}
# Raw dicts in the derender bodies that the core validates as these request models.
_EMBEDDED_REQUESTS = {"chat_request": "ChatCompletionRequest", "completion_request": "CompletionRequest"}


def _refine_request_schemas(schemas: dict[str, Any], served_model_names: tuple[str, ...]) -> None:
    """Tighten the generated schemas to what the core accepts beyond pydantic's field types."""
    schemas["ChatMessage"] = CHAT_MESSAGE
    message_ref = {"$ref": _REF.format(model="ChatMessage")}
    # Any other model name is a 404; "" and null mean the default model.
    model_field = {"anyOf": [{"enum": [*served_model_names, ""]}, {"type": "null"}], "default": None}
    for schema in schemas.values():
        properties = schema.get("properties", {})
        if "messages" in properties:
            properties["messages"] = {**properties["messages"], "items": message_ref}
        if "model" in properties and served_model_names:
            properties["model"] = model_field
        for field, model in _EMBEDDED_REQUESTS.items():
            if field in properties:
                ref = {"$ref": _REF.format(model=model)}
                properties[field] = {"anyOf": [ref, {"type": "null"}], "default": None}


def _request_body_schemas() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Per path: the body schema (a $ref or anyOf of $refs); plus the shared definitions."""
    models = sorted({m for group in _REQUEST_MODELS.values() for m in group}, key=lambda m: m.__name__)
    refs, top = models_json_schema([(m, "validation") for m in models], ref_template=_REF)
    defs = dict(top.get("$defs", {}))
    bodies: dict[str, dict[str, Any]] = {}
    for path, group in _REQUEST_MODELS.items():
        schemas = [refs[(m, "validation")] for m in group]
        bodies[path] = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    # SageMaker's entry: any JSON; a render server has no handler for it (always 400, as vLLM).
    bodies["/invocations"] = {"title": "InvocationRequest", "type": "object"}
    return bodies, defs


def _json_response(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {_JSON: {"schema": schema}}}


def _error_responses(statuses: dict[int, str]) -> dict[str, Any]:
    return {
        str(status): _json_response(text, {"$ref": _REF.format(model="ErrorResponse")})
        for status, text in statuses.items()
    }


def build_openapi(
    app: FastAPI, *, api_key_required: bool, served_model_names: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The complete document for `app` (its routes plus the schemas above)."""
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    bodies, defs = _request_body_schemas()
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.update(defs)
    _refine_request_schemas(schemas, served_model_names)
    schemas["ErrorResponse"] = ERROR_RESPONSE
    if api_key_required:
        schemas["UnauthorizedResponse"] = UNAUTHORIZED_RESPONSE
        components["securitySchemes"] = {"bearerAuth": {"type": "http", "scheme": "bearer"}}
    for path, methods in doc.get("paths", {}).items():
        for method, operation in methods.items():
            _document_operation(path, method, operation, bodies, api_key_required)
    return doc


def _document_operation(
    path: str, method: str, operation: dict[str, Any], bodies: dict[str, Any], api_key_required: bool
) -> None:
    responses: dict[str, Any] = {}
    if path in bodies:
        operation["requestBody"] = {"required": True, "content": {_JSON: {"schema": bodies[path]}}}
    if path in _SUCCESS:
        responses["200"] = _json_response(*_SUCCESS[path])
    elif path in _EMPTY_OK:
        responses["200"] = {"description": _EMPTY_OK[path]}
    elif path == "/metrics":
        responses["200"] = {
            "description": "Prometheus text exposition",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    if path in bodies:
        responses.update(_error_responses(ERROR_STATUSES))
    elif path not in OPEN_PATHS:
        responses.update(_error_responses({503: ERROR_STATUSES[503]}))
    if api_key_required and path not in OPEN_PATHS:
        operation["security"] = [{"bearerAuth": []}]
        responses["401"] = _json_response(
            "Missing or wrong `Authorization: Bearer <api key>`",
            {"$ref": _REF.format(model="UnauthorizedResponse")},
        )
    operation["responses"] = responses


def install_openapi(
    app: FastAPI, *, api_key_required: bool, served_model_names: tuple[str, ...] = ()
) -> None:
    """Make `app.openapi()` (and so `/openapi.json`) return the documented schema, built once."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(
                app, api_key_required=api_key_required, served_model_names=served_model_names
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
