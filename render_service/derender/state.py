"""The per-choice streaming state echoed by clients, and its signed envelope.

`ChoiceState` is everything a replica needs to continue one choice of one stream without
replay: the detokenizer window (a few token strings), the chat parser's state (held marker
text and at most the in-flight tool call), the stop-string scan (bounded by the longest stop
string), the logprob repair context (4 ids), counters, and the compact request settings
(`settings`, see `render_service.derender.settings`). None of it grows with the prompt or the
output.

On the wire it travels inside `StreamStateCodec`'s MAC'd envelope. The MAC binding is
(endpoint kind, engine request id, choice index, config fingerprint), so a state cannot be
replayed into another request, another choice, the other endpoint, or a replica with other
model/template/parser settings. Usage-only chunks carry no choice index; for them the index
is read from the (still unverified) payload first and then verified by the MAC.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar


from parsers._errors import StateError
from parsers._state import JsonState
from parsers.detokenizer import DetokState
from render_service.derender.stops import StopScanState
from render_service.errors import StreamStateError
from render_service.derender.stream_state import StreamStateCodec

__all__ = [
    "ChoiceState",
    "StateEnvelope",
    "LocalStateEnvelope",
    "resume_or_start",
    "read_settings",
]

S = TypeVar("S")

# Inflate at most this much of an unverified payload to read its claimed choice index.
_INDEX_HEAD_BYTES = 96
_INDEX_FIELD = re.compile(rb'^\{"v":\d+,"kind":"[a-z]+","index":(\d{1,9})[,}]')


@dataclass(frozen=True, slots=True)
class ChoiceState(JsonState):
    VERSION: ClassVar[int] = 1

    kind: str  # "chat" | "completion"
    index: int  # choice index this state belongs to
    settings: dict[str, Any]  # compact request settings (settings.ChatSettings.to_json())
    detok: DetokState
    parser: dict[str, Any] | None = None  # the chat parser's JsonState, as JSON
    stop: StopScanState | None = None  # only when the request has stop strings
    role_sent: bool = False
    lp_context: tuple[int, ...] = ()  # last sampled ids, for U+FFFD repair across chunks
    lp_text_offset: int = 0  # completions: absolute logprobs text_offset
    tools_streamed: bool = False
    prompt_len: int = 0  # for the max_model_len bound on later chunks
    n_tokens: int = 0  # output tokens so far (same bound)
    done: bool = False  # a stop string ended the choice; later chunks are ignored

    def __post_init__(self) -> None:
        if self.kind not in ("chat", "completion") or min(self.index, self.lp_text_offset) < 0:
            raise ValueError("bad kind, index or offset")
        if min(self.prompt_len, self.n_tokens) < 0:
            raise ValueError("negative counter")
        if len(self.lp_context) > 4:
            raise ValueError("logprob context longer than 4 ids")


@dataclass(frozen=True, slots=True)
class StateEnvelope:
    """Signs and checks `ChoiceState`s for one endpoint kind and one server configuration."""

    codec: StreamStateCodec
    fingerprint: str

    def _binding(self, kind: str, request_id: str, index: int) -> str:
        return f"{kind}\x1f{request_id}\x1f{index}\x1f{self.fingerprint}"

    def seal(self, state: ChoiceState, request_id: str) -> dict[str, str]:
        return self.codec.encode(
            state.to_json(), binding=self._binding(state.kind, request_id, state.index)
        )

    def open(self, wire: object, kind: str, request_id: str, index: int | None) -> ChoiceState:
        """Verify and decode; `index` None (usage-only chunk) reads it from the payload first."""
        if index is None:
            index = self._claimed_index(wire)
        data = self.codec.decode(wire, binding=self._binding(kind, request_id, index))
        data.pop("issued_at", None)
        try:
            state = ChoiceState.from_json(data)
        except StateError as exc:
            raise StreamStateError(f"invalid stream_state: {exc}") from exc
        if state.kind != kind or state.index != index:
            raise StreamStateError("invalid stream_state: belongs to another choice or endpoint")
        return state

    def _claimed_index(self, wire: object) -> int:
        """The index an unverified usage-only state claims, from the first bytes of its payload.

        Only a hint for choosing the MAC binding (a wrong claim fails the MAC), so inflate just
        the head: `{"v":1,"kind":"...","index":N,...}` puts the index in the first few dozen
        bytes, and a forged payload cannot make us inflate more.
        """
        token = wire.get("rs") if isinstance(wire, dict) else None
        parts = token.split(".") if isinstance(token, str) else []
        if len(parts) != 3 or len(token) > self.codec.max_bytes:
            self.codec.decode(wire, binding="")  # raises the codec's precise error
        try:
            raw = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
            head = zlib.decompressobj().decompress(raw, _INDEX_HEAD_BYTES)
        except (binascii.Error, ValueError, zlib.error):
            raise StreamStateError("invalid stream_state: corrupt payload") from None
        match = _INDEX_FIELD.search(head)
        if match is None:
            raise StreamStateError("invalid stream_state: corrupt payload")
        return int(match.group(1))


@dataclass(frozen=True, slots=True)
class _LocalState:
    """A state handed back to an in-process caller as is; never serialised."""

    state: ChoiceState
    request_id: str


class LocalStateEnvelope:
    """For callers in this process (the gateway): the state never leaves the process, so
    signing and compressing it would be pure cost (about half of a chunk's derender time).
    The same kind/choice/request checks as the signed envelope still apply."""

    def seal(self, state: ChoiceState, request_id: str) -> Any:
        return _LocalState(state, request_id)

    def open(self, wire: object, kind: str, request_id: str, index: int | None) -> ChoiceState:
        if not isinstance(wire, _LocalState):
            raise StreamStateError("invalid stream_state: expected this process's own state")
        state = wire.state
        if wire.request_id != request_id or state.kind != kind:
            raise StreamStateError("invalid stream_state: belongs to another request or endpoint")
        if index is not None and state.index != index:
            raise StreamStateError("invalid stream_state: belongs to another choice")
        return state


def resume_or_start(
    envelope: StateEnvelope | LocalStateEnvelope, kind: str, body: Any, start: Callable[[int], ChoiceState]
) -> tuple[ChoiceState | None, Any]:
    """The state a streaming chunk continues: the echoed one (verified), a fresh one for the
    first chunk of a choice (`start(index)`), or None for a first usage-only chunk.
    Returns (state, the chunk's single choice or None)."""
    chunk_in = body.generate_chunk
    choice = chunk_in.choices[0] if len(chunk_in.choices) == 1 else None
    index = choice.index if choice is not None else None
    if body.stream_state is not None:
        return envelope.open(body.stream_state, kind, chunk_in.request_id, index), choice
    if choice is not None:
        return start(choice.index), choice
    return None, choice


def read_settings(state: ChoiceState, settings_type: Callable[[dict[str, Any]], S]) -> S:
    """The request settings a state carries; a wrong-typed field is a 400, never a 500."""
    try:
        return settings_type(state.settings)
    except TypeError as exc:
        raise StreamStateError("invalid stream_state: unreadable settings") from exc
