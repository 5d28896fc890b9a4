"""The `stream_state` envelope: opaque to clients, versioned, compact and tamper-evident.

Wire shape (what clients echo back unchanged):  {"rs": "<version>.<payload>.<mac>"}
  payload = base64url(zlib(JSON of the derender stream state))
  mac     = base64url(HMAC-SHA256(secret, domain | version | binding | payload)[:16])

`binding` ties a state to one stream (the engine request id, the choice index and the
config fingerprint), so a state lifted from one request and replayed into another, or into
a server with other model/parser settings, fails the MAC check. `issued_at` bounds how long
a state stays valid. Every replica of a deployment must share the secret; a per-process
random secret works only for a single replica.

Checks run before any work, cheapest first: size, shape, version, MAC, decompression (with
an output bound, so a zip bomb cannot blow up memory), JSON, age.

`encode` applies the same two bounds to what it issues (token length, inflated size), so a
state this server hands out is always one it accepts back: a stream whose state would be too
large (a request with very many or very large tool schemas) is refused on the chunk that
would produce it, normally the first, with a 400 naming the flag, never one chunk later.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from render_service.errors import BadRequestError, StreamStateError

__all__ = ["StreamStateCodec", "STATE_VERSION"]

STATE_VERSION = 1
_DOMAIN = b"render-service/stream_state"
_MAC_BYTES = 16  # 128-bit tag: forgery odds 2^-128 per try
# A stream lasting longer than a day is not a live stream; its state is stale.
DEFAULT_MAX_AGE_S = 24 * 3600
# Inflated JSON may be at most this many times `max_bytes` (the zip-bomb bound of `decode`).
INFLATE_RATIO = 8
SIZE_FLAG = "--max-stream-state-bytes"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise StreamStateError("invalid stream_state: not base64url") from exc


@dataclass(frozen=True, slots=True)
class StreamStateCodec:
    secret: bytes
    max_bytes: int
    max_age_s: float = DEFAULT_MAX_AGE_S

    def _mac(self, binding: str, payload: str) -> str:
        message = b"|".join((_DOMAIN, str(STATE_VERSION).encode(), binding.encode(), payload.encode()))
        return _b64(hmac.new(self.secret, message, hashlib.sha256).digest()[:_MAC_BYTES])

    def encode(self, state: dict[str, Any], *, binding: str, now: float | None = None) -> dict[str, str]:
        """Seal `state`; BadRequestError if the result would fail `decode`'s size bounds."""
        body = dict(state, issued_at=int(now if now is not None else time.time()))
        raw = _dump_json(body)
        # `decode` inflates at most this many bytes and refuses a payload with input left over,
        # which one that inflates to exactly the bound may have (the zlib trailer).
        if len(raw) >= self.max_bytes * INFLATE_RATIO:
            raise self._too_large(f"{len(raw)} bytes of JSON before compression", "inflated")
        payload = _b64(zlib.compress(raw, 6))
        token = f"{STATE_VERSION}.{payload}.{self._mac(binding, payload)}"
        if len(token) > self.max_bytes:
            raise self._too_large(f"{len(token)} bytes", "encoded")
        return {"rs": token}

    def _too_large(self, size: str, which: str) -> BadRequestError:
        limit = self.max_bytes * (INFLATE_RATIO if which == "inflated" else 1)
        return BadRequestError(
            f"this stream's stream_state would be {size}, beyond this server's {which} limit "
            f"({limit} bytes from {SIZE_FLAG} {self.max_bytes}), so the next chunk could not "
            "be accepted. The state carries what the parsers read of the request's tools "
            "(names, argument types) and any in-flight tool call: send fewer or smaller tools, "
            f"or raise {SIZE_FLAG} (env "
            "RENDER_SERVICE_MAX_STREAM_STATE_BYTES) on every replica."
        )

    def authentic(self, wire: object, *, binding: str) -> bool:
        """Whether `wire` is a well-formed token whose MAC verifies for `binding` (no inflate,
        no age check: `decode` still runs both before the state is used)."""
        try:
            _, payload, tag = self._split(self._token(wire))
        except StreamStateError:
            return False
        return hmac.compare_digest(tag, self._mac(binding, payload))

    def decode(self, wire: object, *, binding: str, now: float | None = None) -> dict[str, Any]:
        token = self._token(wire)
        version, payload, tag = self._split(token)
        if not hmac.compare_digest(tag, self._mac(binding, payload)):
            raise StreamStateError(
                "invalid stream_state: signature mismatch (forged, altered, from another request, "
                "or signed by a replica with a different stream-state secret or configuration)"
            )
        state = self._inflate(payload)
        age = (now if now is not None else time.time()) - state.get("issued_at", 0)
        if age > self.max_age_s:
            raise StreamStateError("invalid stream_state: expired (stale stream)")
        return state

    def _token(self, wire: object) -> str:
        if not isinstance(wire, dict) or set(wire) != {"rs"} or not isinstance(wire["rs"], str):
            raise StreamStateError(
                "invalid stream_state: expected the object returned by the previous derender call "
                '({"rs": ...}); states from other servers are not accepted'
            )
        token = wire["rs"]
        if not token.isascii():  # our tokens are base64url; also keeps compare_digest on str safe
            raise StreamStateError("invalid stream_state: not base64url")
        if len(token) > self.max_bytes:
            raise StreamStateError(f"invalid stream_state: larger than {self.max_bytes} bytes")
        return token

    @staticmethod
    def _split(token: str) -> tuple[str, str, str]:
        parts = token.split(".")
        if len(parts) != 3:
            raise StreamStateError("invalid stream_state: malformed (truncated?)")
        if parts[0] != str(STATE_VERSION):
            raise StreamStateError(
                f"invalid stream_state: version {parts[0]!r} is not supported (this server speaks "
                f"{STATE_VERSION})"
            )
        return parts[0], parts[1], parts[2]

    def _inflate(self, payload: str) -> dict[str, Any]:
        decompressor = zlib.decompressobj()
        try:
            raw = decompressor.decompress(_unb64(payload), self.max_bytes * INFLATE_RATIO)
        except zlib.error as exc:
            raise StreamStateError("invalid stream_state: corrupt payload") from exc
        if decompressor.unconsumed_tail:
            raise StreamStateError("invalid stream_state: payload too large")
        try:
            state = _load_json(raw)
        except ValueError as exc:  # orjson.JSONDecodeError and json's are ValueErrors
            raise StreamStateError("invalid stream_state: corrupt payload") from exc
        if not isinstance(state, dict):
            raise StreamStateError("invalid stream_state: corrupt payload")
        return state


def _dump_json(body: dict[str, Any]) -> bytes:
    """orjson, or - for the rare state holding a lone surrogate (a JSON escape such as
    `\\ud800` decoded by a tool parser), which UTF-8 cannot carry - json with ASCII escapes,
    which round-trips it exactly."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, ensure_ascii=True, separators=(",", ":")).encode()


def _load_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)  # a state `_dump_json` escaped (lone surrogates)
