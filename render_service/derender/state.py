"""The per-choice streaming state echoed by clients, and its two envelopes.

`ChoiceState` is everything a replica needs to continue one choice of one stream without
replay: the detokenizer window (a few token strings), the chat parser's state (held marker
text and at most the in-flight tool call), the stop-string scan (bounded by the longest stop
string), the logprob repair context (4 ids), counters, and the compact request settings
(`render_service.derender.settings`). None of it grows with the prompt or the output.

In memory every part is typed: the kind is an enum, the settings are `ChatSettings` or
`CompletionSettings`, the parser state is the chat parser's own state value. On the wire the
layout is `_ChoiceWire`'s, unchanged since version 1 (settings and parser state as JSON
objects), so states issued by earlier releases still open. A state is decoded once, when it is
opened; a step never decodes it again, and an in-process caller (the gateway's
`LocalStateEnvelope`) never encodes it at all.

On the wire it travels inside `StreamStateCodec`'s MAC'd envelope. The MAC binding is
(endpoint kind, engine request id, choice index, config fingerprint), so a state cannot be
replayed into another request, another choice, the other endpoint, or a replica with other
model/template/parser settings. Usage-only chunks carry no choice index; for them the index
is read from the (still unverified) payload first and then verified by the MAC.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import hmac
import re
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from parsers import ChatParser, DetokState, JsonState, StateError
from parsers.chat import ChatState
from render_service.derender.schemas import StreamChoiceIn
from render_service.derender.settings import ChatSettings, CompletionSettings
from render_service.derender.stops import StopScanState
from render_service.derender.stream_state import StreamStateCodec
from render_service.errors import StreamStateError

__all__ = [
    "ChoiceKind",
    "ChoiceState",
    "Envelope",
    "LocalStateEnvelope",
    "SettingsT",
    "StateEnvelope",
    "resume_or_start",
]

SettingsT = TypeVar("SettingsT", ChatSettings, CompletionSettings)

# Inflate at most this much of an unverified payload to read its claimed choice index.
_INDEX_HEAD_BYTES = 96
_INDEX_FIELD = re.compile(rb'^\{"v":\d+,"kind":"[a-z]+","index":(\d{1,9})[,}]')


class ChoiceKind(str, enum.Enum):
    CHAT = "chat"
    COMPLETION = "completion"


@dataclass(frozen=True, slots=True)
class _ChoiceWire(JsonState):
    """The wire layout of a choice state (key order included: `_INDEX_FIELD` reads it)."""

    VERSION: ClassVar[int] = 1

    kind: str
    index: int
    settings: dict[str, Any]
    detok: DetokState
    parser: dict[str, Any] | None = None
    stop: StopScanState | None = None
    role_sent: bool = False
    lp_context: tuple[int, ...] = ()
    lp_text_offset: int = 0
    tools_streamed: bool = False
    prompt_len: int = 0
    n_tokens: int = 0
    done: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("chat", "completion") or min(self.index, self.lp_text_offset) < 0:
            raise ValueError("bad kind, index or offset")
        if min(self.prompt_len, self.n_tokens) < 0:
            raise ValueError("negative counter")
        if len(self.lp_context) > 4:
            raise ValueError("logprob context longer than 4 ids")


@dataclass(frozen=True, slots=True)
class ChoiceState(Generic[SettingsT]):
    kind: ChoiceKind
    index: int  # choice index this state belongs to
    settings: SettingsT
    detok: DetokState
    parser: ChatState | None = None  # chat with a tool or reasoning parser
    stop: StopScanState | None = None  # only when the request has stop strings
    role_sent: bool = False
    lp_context: tuple[int, ...] = ()  # last sampled ids, for U+FFFD repair across chunks
    lp_text_offset: int = 0  # completions: absolute logprobs text_offset
    tools_streamed: bool = False
    prompt_len: int = 0  # for the max_model_len bound on later chunks
    n_tokens: int = 0  # output tokens so far (same bound)
    done: bool = False  # a stop string ended the choice; later chunks are ignored

    def replace(self, **changes: Any) -> ChoiceState[SettingsT]:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """`_ChoiceWire`'s JSON, built directly (orjson writes the tuples as arrays)."""
        return {
            "v": _ChoiceWire.VERSION,
            "kind": self.kind.value,
            "index": self.index,
            "settings": self.settings.to_json(),
            "detok": self.detok.to_json(),
            "parser": None if self.parser is None else self.parser.to_json(),
            "stop": None if self.stop is None else self.stop.to_json(),
            "role_sent": self.role_sent,
            "lp_context": self.lp_context,
            "lp_text_offset": self.lp_text_offset,
            "tools_streamed": self.tools_streamed,
            "prompt_len": self.prompt_len,
            "n_tokens": self.n_tokens,
            "done": self.done,
        }


def _typed(wire: _ChoiceWire, settings_type: type[SettingsT]) -> ChoiceState[SettingsT]:
    """The typed state of a verified wire state; bad settings or parser state are 400s.

    A parser state that does not decode raises the parsers' `StateError`, which the caller's
    `engine_output_errors` turns into a StreamStateError like every other parser state error.
    """
    try:
        settings = settings_type.from_json(wire.settings)
    except TypeError as exc:
        raise StreamStateError("invalid stream_state: unreadable settings") from exc
    parser = None if wire.parser is None else ChatParser.state_type().from_json(wire.parser)
    return ChoiceState(
        kind=ChoiceKind(wire.kind),
        index=wire.index,
        settings=settings,
        detok=wire.detok,
        parser=parser,
        stop=wire.stop,
        role_sent=wire.role_sent,
        lp_context=wire.lp_context,
        lp_text_offset=wire.lp_text_offset,
        tools_streamed=wire.tools_streamed,
        prompt_len=wire.prompt_len,
        n_tokens=wire.n_tokens,
        done=wire.done,
    )


class Envelope(Protocol):
    def seal(self, state: ChoiceState[Any], request_id: str) -> object: ...

    def authentic(self, wire: object, kind: ChoiceKind, request_id: str, index: int) -> bool:
        """Whether `wire` is this server's state for that stream and choice (cheap: no decode)."""
        ...

    def open(
        self,
        wire: object,
        kind: ChoiceKind,
        settings_type: type[SettingsT],
        request_id: str,
        index: int | None,
    ) -> ChoiceState[SettingsT]: ...


class _IssuedStates:
    """The last state this process sealed for each stream (by MAC binding), bounded.

    A token byte-equal to the one this process signed for that binding is authentic by
    construction, so the next chunk of a stream served by the same replica opens it without
    the MAC, the inflate, the JSON decode and the typed rebuild (states are frozen values;
    the in-process `LocalStateEnvelope` hands them back the same way). Any other token - an
    older one, one from another replica, a forgery - is opened from its bytes as before.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: dict[str, tuple[str, int, ChoiceState[Any]]] = {}
        self._lock = threading.Lock()  # seal and open run on pool threads and the event loop

    def put(self, binding: str, token: str, issued_at: int, state: ChoiceState[Any]) -> None:
        with self._lock:
            self._items.pop(binding, None)  # re-insert: eviction drops the oldest streams first
            self._items[binding] = (token, issued_at, state)
            if len(self._items) > self._capacity:
                del self._items[next(iter(self._items))]

    def get(self, binding: str, wire: object) -> tuple[int, ChoiceState[Any]] | None:
        """(issued_at, state) if `wire` is the token last issued for `binding`."""
        token = wire.get("rs") if isinstance(wire, dict) and len(wire) == 1 else None
        entry = self._items.get(binding)
        if entry is None or not isinstance(token, str) or not token.isascii():
            return None
        # Constant time: the cached token is a valid one, not to be guessed byte by byte.
        return (entry[1], entry[2]) if hmac.compare_digest(entry[0], token) else None


# Streams whose last state is kept per process (a few KB each).
_ISSUED_CAPACITY = 4096


@dataclass(frozen=True, slots=True)
class StateEnvelope:
    """Signs and checks `ChoiceState`s for one endpoint kind and one server configuration."""

    codec: StreamStateCodec
    fingerprint: str
    _issued: _IssuedStates = field(default_factory=lambda: _IssuedStates(_ISSUED_CAPACITY),
                                   compare=False, repr=False)

    def _binding(self, kind: str, request_id: str, index: int) -> str:
        return f"{kind}\x1f{request_id}\x1f{index}\x1f{self.fingerprint}"

    def seal(self, state: ChoiceState[Any], request_id: str) -> dict[str, str]:
        binding = self._binding(state.kind.value, request_id, state.index)
        issued_at = int(time.time())
        wire = self.codec.encode(state.to_json(), binding=binding, now=issued_at)
        self._issued.put(binding, wire["rs"], issued_at, state)
        return wire

    def authentic(self, wire: object, kind: ChoiceKind, request_id: str, index: int) -> bool:
        binding = self._binding(kind.value, request_id, index)
        return self._fresh(binding, wire) is not None or self.codec.authentic(wire, binding=binding)

    def open(
        self,
        wire: object,
        kind: ChoiceKind,
        settings_type: type[SettingsT],
        request_id: str,
        index: int | None,
    ) -> ChoiceState[SettingsT]:
        """Verify and decode; `index` None (usage-only chunk) reads it from the payload first."""
        if index is None:
            index = self._claimed_index(wire)
        binding = self._binding(kind.value, request_id, index)
        issued: ChoiceState[SettingsT] | None = self._fresh(binding, wire)
        if issued is not None:
            return issued
        data = self.codec.decode(wire, binding=binding)
        data.pop("issued_at", None)
        try:
            state = _ChoiceWire.from_json(data)
        except StateError as exc:
            raise StreamStateError(f"invalid stream_state: {exc}") from exc
        if state.kind != kind.value or state.index != index:
            raise StreamStateError("invalid stream_state: belongs to another choice or endpoint")
        return _typed(state, settings_type)

    def _fresh(self, binding: str, wire: object) -> Any:
        """The state this process issued as `wire` for `binding`, if not expired (else None:
        decoding it gives the precise error)."""
        hit = self._issued.get(binding, wire)
        if hit is None or time.time() - hit[0] > self.codec.max_age_s:
            return None
        return hit[1]

    def _claimed_index(self, wire: object) -> int:
        """The index an unverified usage-only state claims, from the first bytes of its payload.

        Only a hint for choosing the MAC binding (a wrong claim fails the MAC), so inflate just
        the head: `{"v":1,"kind":"...","index":N,...}` puts the index in the first few dozen
        bytes, and a forged payload cannot make us inflate more.
        """
        token = wire.get("rs") if isinstance(wire, dict) else None
        parts = token.split(".") if isinstance(token, str) else []
        if len(parts) != 3 or not isinstance(token, str) or len(token) > self.codec.max_bytes:
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

    state: ChoiceState[Any]
    request_id: str


class LocalStateEnvelope:
    """For callers in this process (the gateway): the state never leaves the process, so
    signing and compressing it would be pure cost (about half of a chunk's derender time).
    The same kind/choice/request checks as the signed envelope still apply."""

    def seal(self, state: ChoiceState[Any], request_id: str) -> _LocalState:
        return _LocalState(state, request_id)

    def authentic(self, wire: object, kind: ChoiceKind, request_id: str, index: int) -> bool:
        return (isinstance(wire, _LocalState) and wire.request_id == request_id
                and wire.state.kind is kind and wire.state.index == index)

    def open(
        self,
        wire: object,
        kind: ChoiceKind,
        settings_type: type[SettingsT],
        request_id: str,
        index: int | None,
    ) -> ChoiceState[SettingsT]:
        if not isinstance(wire, _LocalState):
            raise StreamStateError("invalid stream_state: expected this process's own state")
        state: ChoiceState[SettingsT] = wire.state
        if wire.request_id != request_id or state.kind is not kind:
            raise StreamStateError("invalid stream_state: belongs to another request or endpoint")
        if index is not None and state.index != index:
            raise StreamStateError("invalid stream_state: belongs to another choice")
        return state


def resume_or_start(
    envelope: Envelope,
    kind: ChoiceKind,
    settings_type: type[SettingsT],
    stream_state: object,
    request_id: str,
    choices: list[StreamChoiceIn],
    start: Callable[[int], ChoiceState[SettingsT]],
) -> tuple[ChoiceState[SettingsT] | None, StreamChoiceIn | None]:
    """The state a streaming chunk continues: the echoed one (verified), a fresh one for the
    first chunk of a choice (`start(index)`), or None for a first usage-only chunk.
    Returns (state, the chunk's single choice or None)."""
    choice = choices[0] if len(choices) == 1 else None
    index = choice.index if choice is not None else None
    if stream_state is not None:
        return envelope.open(stream_state, kind, settings_type, request_id, index), choice
    if choice is not None:
        return start(choice.index), choice
    return None, choice
