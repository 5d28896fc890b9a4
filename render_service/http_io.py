"""Request bodies in, JSON responses out: the HTTP helpers both apps (render, gateway) share."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from render_service.errors import BadRequestError

__all__ = ["read_json_object", "json_response", "VLLM_API_VERSION"]

# The vLLM release whose wire format this service speaks (reported by GET /version).
VLLM_API_VERSION = "0.33.0"


async def read_json_object(request: Request) -> dict[str, Any]:
    """The body as a JSON object; vLLM's content-type and shape checks (both 400)."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise BadRequestError("Unsupported Media Type: Only 'application/json' is allowed")
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise BadRequestError(f"JSON decode error: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequestError("The request body must be a JSON object.")
    return body


def json_response(data: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS), status, media_type="application/json"
    )
