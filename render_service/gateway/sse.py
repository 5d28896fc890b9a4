"""Server-sent events, both directions, sans-IO.

Decoding (engine -> gateway): `SSEDecoder.feed(bytes)` returns the `data:` payloads of every
event completed by those bytes; the state is the unterminated tail only. vLLM's generate
stream is `data: <json>\\n\\n` per event and `data: [DONE]\\n\\n` at the end; we also accept CRLF
and multi-line data (joined with "\\n", per the SSE spec) so a proxy in between cannot break us.

Encoding (gateway -> client) follows what `vllm serve` writes for /v1/chat/completions and
/v1/completions: `data: <compact json>\\n\\n` per chunk, a mid-stream error as
`data: {"error":{"message":...,"type":...,"param":null,"code":N}}\\n\\n`, and always
`data: [DONE]\\n\\n` last.
"""

from __future__ import annotations

from typing import Any

from render_service import jsonio

__all__ = ["SSEDecoder", "DONE_PAYLOAD", "DONE_EVENT", "encode_event", "encode_error_event"]

DONE_PAYLOAD = "[DONE]"
DONE_EVENT = b"data: [DONE]\n\n"
# One engine event is one chunk of token ids; 8 MiB is far above any real one (logprobs of a
# long chunk included), and bounds the tail a misbehaving engine can make us hold.
MAX_EVENT_BYTES = 8 * 1024 * 1024


class SSEProtocolError(ValueError):
    """The byte stream is not SSE (or an event is over MAX_EVENT_BYTES)."""


class SSEDecoder:
    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> list[str]:
        buffer = self._tail + data if self._tail else data
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        events = buffer.split(b"\n\n")
        self._tail = events.pop()
        if len(self._tail) > MAX_EVENT_BYTES:
            raise SSEProtocolError(f"SSE event over {MAX_EVENT_BYTES} bytes")
        return [p for p in (_data_of(e) for e in events) if p is not None]

    @property
    def pending(self) -> bool:
        """True if bytes of an unfinished event are held (a stream cut mid-event)."""
        return bool(self._tail.strip())


def _data_of(event: bytes) -> str | None:
    lines = [line for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None  # comment or keep-alive
    parts = [line[5:].removeprefix(b" ") for line in lines]
    return b"\n".join(parts).decode("utf-8")


def encode_event(payload: Any) -> bytes:
    return b"data: " + jsonio.dumps(payload) + b"\n\n"


def encode_error_event(message: str, error_type: str, status: int, param: str | None = None) -> bytes:
    body = {"error": {"message": message, "type": error_type, "param": param, "code": status}}
    return encode_event(body)
