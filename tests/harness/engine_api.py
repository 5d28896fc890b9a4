"""Minimal clients for a tokens-only engine's generate and abort endpoints (tests only).

Sync functions use httpx.Client, async ones httpx.AsyncClient; every call has a timeout.
Request bodies are plain dicts in the GenerateRequest shape (vLLM wire protocol §2.5), so a
test can send exactly what our render produced. Non-2xx answers raise EngineHTTPError with
the status and body, because a test must see the engine's error message.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import httpx

from .script_protocol import script_extra_args

GENERATE_PATH = "/inference/v1/generate"
ABORT_PATH = "/inference/v1/abort_requests"
# The engine prefixes the caller's id (X-Request-Id header or body request_id) with this.
ENGINE_REQUEST_ID_PREFIX = "generate-tokens-"
DEFAULT_TIMEOUT_S = 60.0
SSE_DONE = "[DONE]"


class EngineHTTPError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"engine answered {status}: {body[:2000]}")
        self.status = status
        self.body = body


def generate_body(
    token_ids: list[int],
    request_id: str,
    *,
    max_tokens: int | None = None,
    script: list[int] | None = None,
    stream: bool = False,
    **sampling: object,
) -> dict:
    """A GenerateRequest body; `script` forces the output (see script_protocol)."""
    params: dict = dict(sampling)
    if max_tokens is not None:
        params["max_tokens"] = max_tokens
    if script is not None:
        params["extra_args"] = {**params.get("extra_args", {}), **script_extra_args(script)}
    return {"request_id": request_id, "token_ids": token_ids, "sampling_params": params,
            "stream": stream}  # fmt: skip


def engine_request_id(request_id: str) -> str:
    """The id the engine knows a request by (what abort_requests wants)."""
    return ENGINE_REQUEST_ID_PREFIX + request_id


def _raise_for_status(status: int, body: str) -> None:
    if status >= 400:
        raise EngineHTTPError(status, body)


def _maybe_event(line: str) -> dict | str | None:
    """One SSE line -> parsed JSON event, the string "[DONE]", or None (blank/other)."""
    if not line.startswith("data: "):
        return None
    payload = line[len("data: ") :]
    return SSE_DONE if payload == SSE_DONE else json.loads(payload)


@dataclass
class StreamResult:
    """Everything an SSE generate stream returned."""

    events: list[dict] = field(default_factory=list)
    done: bool = False  # saw data: [DONE]

    def token_ids(self, index: int = 0) -> list[int]:
        return [t for e in self.events for c in e["choices"] if c["index"] == index
                for t in c["token_ids"] or []]  # fmt: skip

    def finish_reason(self, index: int = 0) -> str | None:
        reasons = [c["finish_reason"] for e in self.events for c in e["choices"]
                   if c["index"] == index and c["finish_reason"] is not None]  # fmt: skip
        return reasons[-1] if reasons else None


# ---------------------------------------------------------------- sync


def generate(base_url: str, body: dict, timeout: float = DEFAULT_TIMEOUT_S) -> dict:
    """Non-streaming generate; returns the JSON response."""
    response = httpx.post(base_url + GENERATE_PATH, json={**body, "stream": False},
                          timeout=timeout)  # fmt: skip
    _raise_for_status(response.status_code, response.text)
    return response.json()


def iter_generate_stream(
    base_url: str, body: dict, timeout: float = DEFAULT_TIMEOUT_S
) -> Iterator[dict | str]:
    """Streaming generate; yields each event's JSON, then "[DONE]"."""
    with httpx.stream("POST", base_url + GENERATE_PATH, json={**body, "stream": True},
                      timeout=timeout) as response:  # fmt: skip
        if response.status_code >= 400:
            _raise_for_status(response.status_code, response.read().decode())
        for line in response.iter_lines():
            if (event := _maybe_event(line)) is not None:
                yield event


def generate_stream(base_url: str, body: dict, timeout: float = DEFAULT_TIMEOUT_S) -> StreamResult:
    result = StreamResult()
    for event in iter_generate_stream(base_url, body, timeout):
        if event == SSE_DONE:
            result.done = True
        else:
            result.events.append(event)
    return result


def abort_requests(base_url: str, engine_ids: list[str], timeout: float = 10.0) -> None:
    """POST /inference/v1/abort_requests; ids are engine ids (engine_request_id)."""
    response = httpx.post(base_url + ABORT_PATH, json={"request_ids": engine_ids},
                          timeout=timeout)  # fmt: skip
    _raise_for_status(response.status_code, response.text)


def metrics_text(base_url: str, timeout: float = 10.0) -> str:
    response = httpx.get(base_url + "/metrics", timeout=timeout)
    _raise_for_status(response.status_code, response.text)
    return response.text


def metric_total(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of one Prometheus series whose labels include `labels`."""
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    total = 0.0
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        series, value = line.rsplit(" ", 1)
        if all(label in series for label in wanted):
            total += float(value)
    return total


# ---------------------------------------------------------------- async


async def agenerate(
    client: httpx.AsyncClient, base_url: str, body: dict, timeout: float = DEFAULT_TIMEOUT_S
) -> dict:
    response = await client.post(base_url + GENERATE_PATH, json={**body, "stream": False},
                                 timeout=timeout)  # fmt: skip
    _raise_for_status(response.status_code, response.text)
    return response.json()


async def aiter_generate_stream(
    client: httpx.AsyncClient, base_url: str, body: dict, timeout: float = DEFAULT_TIMEOUT_S
) -> AsyncIterator[dict | str]:
    async with client.stream("POST", base_url + GENERATE_PATH, json={**body, "stream": True},
                             timeout=timeout) as response:  # fmt: skip
        if response.status_code >= 400:
            _raise_for_status(response.status_code, (await response.aread()).decode())
        async for line in response.aiter_lines():
            if (event := _maybe_event(line)) is not None:
                yield event


async def aabort_requests(
    client: httpx.AsyncClient, base_url: str, engine_ids: list[str], timeout: float = 10.0
) -> None:
    response = await client.post(base_url + ABORT_PATH, json={"request_ids": engine_ids},
                                 timeout=timeout)  # fmt: skip
    _raise_for_status(response.status_code, response.text)
