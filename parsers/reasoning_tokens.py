"""`usage.completion_tokens_details.reasoning_tokens` as vLLM 0.33 counts it, as a tiny fold.

vLLM 0.33's chat serving reports `parser.count_reasoning_tokens(generated_ids)` when a
reasoning parser is configured. What that method is depends on the family (vLLM's
ReasoningParserManager, checked in the reference venv):

* `muse` / `musespark1x`: the tokens of bare and `to=self` bodies (`_MuseCounter`).
* `granite`, `minimax_m2_append_think`, and `deepseek_v3` with thinking off
  (`IdentityReasoningParser`): the base method, always 0; `minimax_m3`: the depth counter
  below over `<mm:think>`, starting at depth 1 when `thinking_mode` is "enabled".
* `deepseek_r1`, and `deepseek_v3` with thinking on (it delegates to R1):
  `BaseThinkingReasoningParser.count_reasoning_tokens`, a depth counter over the `<think>` /
  `</think>` token ids: a token is counted while the depth is above zero, markers are not,
  and a stray end never takes the depth below zero. Streaming recounts the same ids, so the
  stream and the batch agree.
* `qwen3`, `glm45`, `mistral`, `kimi_k2` (and `glm47`, `ling3`, `mimo`, which run the glm45 /
  qwen3 configs; `seed_oss`, `minimax_m2` with their own markers): adapters over vLLM's parser
  engine
  (`ParserEngineReasoningAdapter.count_reasoning_tokens`), which sum the token counts the
  engine attached to the REASONING text it emitted. Two regimes:

  - *token level* (every non-streamed response; a stream whose prompt already ended
    reasoning, which vLLM's DelegatingParser then never feeds to the reasoning parser): a
    fresh engine parses the decoded output with its token ids in one pass, tool parsing on.
    With token ids every marker that is one vocabulary token is recognised by id only (its
    text spelled by other tokens is plain text), so this reduces to a phase machine over
    token ids: plain tokens count while the phase is REASONING, marker and dropped
    special tokens never count, tool markers enter and leave a TOOL phase (`_FAMILIES`).
  - *live* (a stream whose prompt leaves reasoning open): the count is the streaming
    engine's own, fed `(delta_text, delta_token_ids)` per step until reasoning ends, after
    which the parser is no longer fed (a later re-opened reasoning block is not counted,
    unlike the token-level count). The fold replays what the engine's token-id scanner and
    lexer do with each step, as far as counting sees it: marker tokens split the step; the
    other tokens ride on the text between them, each attributed to the character where its
    individually decoded text is found (the text's first character when not found), and
    count when the lexer emits that character as reasoning; the lexer holds back text that
    may still start a marker (`MarkerSet`, the engine lexer's rule) until the next step, a
    marker token or the end; a marker token whose text the step's text lacks waits for it
    (and the text meanwhile waits too). Hence vLLM's streamed count differs from its own
    non-streamed one where a step's text is empty (a character split over tokens, text the
    detokenizer holds back for stop strings, a final EOS it does not decode): those tokens
    are never counted. The caller passes each step's text as `vllm serve` decoded it.

`ReasoningTokenCounter.fold` feeds one step (its token ids and, for the live regime, its text);
`finish` ends the output; `ReasoningCount.count` is what vLLM reports after that step. The
state is a few ints plus at most a marker's worth of held text (and, while a marker token
waits for its text, that text).

Known gaps (not modelled): in the token-level regime, tokens that decode to no text at all
between two marker tokens count here, while vLLM's scanner drops their empty chunk. Mistral's
plain-text `<think>` encoding (v11 tokenizers with grammar support, which derender never
selects) counts 0.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple

import regex as re

from parsers._base import ReasoningParser
from parsers._errors import ParserConfigError, StateError
from parsers._state import JsonState
from parsers._text import MarkerSet

__all__ = ["CountPhase", "ReasoningCount", "ReasoningTokenCounter", "reasoning_token_counter"]


class CountPhase(str, enum.Enum):
    REASONING = "reasoning"
    CONTENT = "content"
    TOOL = "tool"  # inside a tool call (token-level regime only)


class Kind(str, enum.Enum):
    """What a marker token id is to the family's engine config."""

    THINK_START = "think_start"
    THINK_END = "think_end"
    TOOL_START = "tool_start"
    TOOL_END = "tool_end"
    OTHER = "other"  # a token-id terminal with no transition out of a phase we track


# (phase, kind) -> (next phase, emits REASONING_END); no entry: the marker is text (not counted).
Transitions = Mapping[tuple[CountPhase, Kind], tuple[CountPhase, bool]]
R, C, T = CountPhase.REASONING, CountPhase.CONTENT, CountPhase.TOOL


@dataclass(frozen=True)
class _Family:
    """A parser-engine family's token-id terminals and transitions, reduced to 3 phases.

    Tool sub-states (preamble/name/args/between) are one TOOL phase: in these configs every
    exit from them goes to CONTENT on TOOL_END or nowhere, and no tool-internal text terminal
    leads back into REASONING.
    """

    markers: Mapping[str, Kind]  # the config's token_id_terminals
    transitions: Transitions


_QWEN3 = _Family(
    {"<think>": Kind.THINK_START, "</think>": Kind.THINK_END,
     "<tool_call>": Kind.TOOL_START, "</tool_call>": Kind.TOOL_END},
    {(R, Kind.THINK_START): (R, False), (R, Kind.THINK_END): (C, True),
     (C, Kind.THINK_END): (C, False), (R, Kind.TOOL_START): (T, True),
     (C, Kind.TOOL_START): (T, True), (T, Kind.TOOL_START): (T, False),
     (T, Kind.TOOL_END): (C, False)},
)
_GLM45 = _Family(  # vllm/parser/glm47_moe.py glm47_moe_config(thinking=True)
    {"<think>": Kind.THINK_START, "</think>": Kind.THINK_END,
     "<tool_call>": Kind.TOOL_START, "</tool_call>": Kind.TOOL_END},
    {(C, Kind.THINK_START): (R, False), (R, Kind.THINK_START): (R, False),
     (R, Kind.THINK_END): (C, True), (C, Kind.THINK_END): (C, False),
     (R, Kind.TOOL_START): (T, True), (C, Kind.TOOL_START): (T, False),
     (T, Kind.TOOL_END): (C, False)},
)
_MISTRAL = _Family(  # vllm/parser/mistral.py mistral_config("special_token"); tools never end
    {"[THINK]": Kind.THINK_START, "[/THINK]": Kind.THINK_END,
     "[TOOL_CALLS]": Kind.TOOL_START, "[ARGS]": Kind.OTHER},
    {(C, Kind.THINK_START): (R, False), (R, Kind.THINK_START): (R, False),
     (R, Kind.THINK_END): (C, True), (C, Kind.THINK_END): (C, False),
     (R, Kind.TOOL_START): (T, True), (C, Kind.TOOL_START): (T, True),
     (T, Kind.TOOL_START): (T, False), (T, Kind.OTHER): (T, False)},
)
_KIMI_K2 = _Family(  # vllm/parser/kimi_k2.py kimi_k2_config(thinking=True); tools never end
    {"<think>": Kind.THINK_START, "</think>": Kind.THINK_END,
     "<|tool_calls_section_begin|>": Kind.TOOL_START, "<|tool_calls_section_end|>": Kind.OTHER,
     "<|tool_call_begin|>": Kind.OTHER, "<|tool_call_end|>": Kind.OTHER,
     "<|tool_call_argument_begin|>": Kind.OTHER},
    {(R, Kind.THINK_START): (R, False), (R, Kind.THINK_END): (C, True),
     (C, Kind.THINK_END): (C, False), (R, Kind.TOOL_START): (T, True),
     (C, Kind.TOOL_START): (T, False)},
)


_SEED_OSS = _Family(  # vllm/parser/seed_oss.py: qwen3_config with Seed's wrapper markers
    {"<seed:think>": Kind.THINK_START, "</seed:think>": Kind.THINK_END,
     "<seed:tool_call>": Kind.TOOL_START, "</seed:tool_call>": Kind.TOOL_END},
    _QWEN3.transitions,
)
_MINIMAX_M2 = _Family(  # vllm/parser/minimax_m2.py minimax_m2_config
    {"<think>": Kind.THINK_START, "</think>": Kind.THINK_END,
     "<minimax:tool_call>": Kind.TOOL_START, "</minimax:tool_call>": Kind.TOOL_END},
    {(R, Kind.THINK_START): (R, False), (R, Kind.THINK_END): (C, True),
     (C, Kind.THINK_END): (C, False), (R, Kind.TOOL_START): (T, True),
     (C, Kind.TOOL_START): (T, False), (T, Kind.TOOL_END): (C, False),
     (C, Kind.TOOL_END): (C, False)},
)
_FAMILIES = {"qwen3": _QWEN3, "glm45": _GLM45, "mistral": _MISTRAL, "kimi_k2": _KIMI_K2,
             # vLLM runs these on the same engine config as the family they alias.
             "glm47": _GLM45, "ling3": _GLM45, "mimo": _QWEN3,
             "seed_oss": _SEED_OSS, "minimax_m2": _MINIMAX_M2}

_DROP = "drop"  # a special token that is no marker: vLLM's engine drops it


class _Text(NamedTuple):
    text: str
    pieces: tuple[str, ...] | None  # the tokens' own decoded texts, when the scanner has them
    n_tokens: int  # tokens the text carries


class _Marker(NamedTuple):
    token_id: int
    text: str  # its decoded text


_Item = _Text | _Marker


@dataclasses.dataclass(frozen=True, slots=True)
class ReasoningCount(JsonState):
    """One choice's count so far and what the next step needs."""

    VERSION = 1

    count: int = 0
    phase: CountPhase = CountPhase.CONTENT
    live: bool = False  # the live (text-fed streaming engine) regime
    ended: bool = False  # live: reasoning ended, vLLM no longer feeds the parser
    depth: int = 0  # depth-counter families
    held: str = ""  # live: text the lexer holds (it may still start a marker)
    held_offsets: tuple[int, ...] = ()  # live: first-character offsets of held tokens
    # live: marker tokens waiting for their text (the scanner's deferred terminals), the
    # tokens counted before each, the text that arrived meanwhile, and tokens after the last.
    deferred_ids: tuple[int, ...] = ()
    deferred_counts: tuple[int, ...] = ()
    post_text: str = ""
    trailing: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.phase, CountPhase):
            raise ValueError("unknown phase")
        if min(self.count, self.depth, self.trailing) < 0:
            raise ValueError("negative count")
        if self.held_offsets and not 0 <= min(self.held_offsets) <= max(self.held_offsets) \
                < len(self.held):
            raise ValueError("held token offset outside the held text")
        if self.deferred_ids or self.deferred_counts:
            if len(self.deferred_ids) != len(self.deferred_counts):
                raise ValueError("deferred markers and counts differ in length")
            if min(*self.deferred_ids, *self.deferred_counts) < 0:
                raise ValueError("negative deferred marker or count")


class ReasoningTokenCounter:
    """Counts like the family vLLM 0.33 runs for one request's settings (see module doc)."""

    def start(self, prompt_token_ids: Sequence[int] = (), *, streaming: bool) -> ReasoningCount:
        return ReasoningCount()

    def needs_text(self, state: ReasoningCount) -> bool:
        """Whether `fold` reads the step text (callers may skip decoding it otherwise)."""
        return False

    def fold(self, state: ReasoningCount, token_ids: Sequence[int], text: str = ""
             ) -> ReasoningCount:
        return state

    def finish(self, state: ReasoningCount) -> ReasoningCount:
        return state

    def count(self, token_ids: Sequence[int], prompt_token_ids: Sequence[int] = ()) -> int:
        """A non-streamed response's count (vLLM's batch path)."""
        state = self.start(prompt_token_ids, streaming=False)
        return self.finish(self.fold(state, token_ids)).count

    @staticmethod
    def check(state: object) -> ReasoningCount:
        if not isinstance(state, ReasoningCount):
            raise StateError("expected a ReasoningCount state")
        return state


class _DepthCounter(ReasoningTokenCounter):
    """BaseThinkingReasoningParser.count_reasoning_tokens, folded."""

    def __init__(self, start_id: int | None, end_id: int | None, depth: int = 0) -> None:
        self.start_id, self.end_id = start_id, end_id
        self.initial_depth = depth  # MiniMax-M3 starts inside reasoning when its template opened it

    def start(self, prompt_token_ids: Sequence[int] = (), *, streaming: bool) -> ReasoningCount:
        return ReasoningCount(depth=self.initial_depth)

    def fold(self, state: ReasoningCount, token_ids: Sequence[int], text: str = ""
             ) -> ReasoningCount:
        state = self.check(state)
        depth, count = state.depth, state.count
        for token_id in token_ids:
            if token_id == self.start_id:
                depth += 1
            elif token_id == self.end_id:
                depth = max(depth - 1, 0)
            elif depth:
                count += 1
        return state.replace(depth=depth, count=count)


class _XtmlCounter(ReasoningTokenCounter):
    """KimiK3ReasoningParser.count_reasoning_tokens: every token counts while in reasoning
    (from the start); `<|open|>think<|sep|>` (re)opens it, `<|close|>think<|sep|>` closes it,
    and before any think open `<|open|>response<|sep|>` closes it; marker ids never count.
    State: phase (in reasoning or not), depth 1 once a think open was seen, deferred_ids the
    ids that may still start a marker at the end of a fold."""

    def __init__(self, parser: ReasoningParser) -> None:
        from parsers.reasoning.kimi_k3 import marker_ids

        vocab = parser.vocab
        self.think_open = tuple(marker_ids(vocab, "<|open|>think<|sep|>"))
        self.think_close = tuple(marker_ids(vocab, "<|close|>think<|sep|>"))
        self.response_open = tuple(marker_ids(vocab, "<|open|>response<|sep|>"))

    def start(self, prompt_token_ids: Sequence[int] = (), *, streaming: bool) -> ReasoningCount:
        return ReasoningCount(phase=CountPhase.REASONING)

    def fold(self, state: ReasoningCount, token_ids: Sequence[int], text: str = "") -> ReasoningCount:
        return self._scan(self.check(state), [*state.deferred_ids, *token_ids], final=False)

    def finish(self, state: ReasoningCount) -> ReasoningCount:
        return self._scan(self.check(state), list(state.deferred_ids), final=True)

    def _scan(self, state: ReasoningCount, ids: list[int], *, final: bool) -> ReasoningCount:
        reasoning, seen_open, count = state.phase is CountPhase.REASONING, state.depth > 0, state.count
        i, n = 0, len(ids)
        while i < n:
            markers = [(self.think_open, True, True), (self.think_close, False, seen_open)]
            if not seen_open:
                markers.append((self.response_open, False, False))
            found = next((m for m in markers if m[0] and tuple(ids[i : i + len(m[0])]) == m[0]), None)
            if found is not None:
                reasoning, seen_open = found[1], found[2]
                i += len(found[0])
                continue
            if not final and any(m[0] and n - i < len(m[0]) and m[0][: n - i] == tuple(ids[i:]) for m in markers):
                break  # the rest may still be a marker: the next fold decides
            count += reasoning
            i += 1
        phase = CountPhase.REASONING if reasoning else CountPhase.CONTENT
        held = tuple(ids[i:])  # (deferred_counts only pairs up with deferred_ids here)
        return state.replace(phase=phase, depth=int(seen_open), count=count, deferred_ids=held,
                             deferred_counts=(0,) * len(held))


class _EngineCounter(ReasoningTokenCounter):
    """ParserEngineReasoningAdapter.count_reasoning_tokens for an engine-table family."""

    def __init__(self, parser: ReasoningParser, family: _Family,
                 decode_piece: Callable[[int], str]) -> None:
        self.parser = parser
        vocab = parser.vocab
        kinds: dict[int, Any] = {}
        for text, kind in family.markers.items():
            token_id = vocab.token_to_id(text)
            if token_id is not None:
                kinds[token_id] = kind
        spec = parser.spec  # type: ignore[attr-defined]
        configured = set(spec.markers)
        drops = {t for t in parser.special_tokens if t and t not in configured}
        for text in drops:
            token_id = vocab.token_to_id(text)
            if token_id is not None and token_id not in kinds:
                kinds[token_id] = _DROP
        self._kinds = kinds
        self._transitions = family.transitions
        # The engine lexer's literals: every text terminal plus the dropped special tokens.
        self._markers = MarkerSet((*spec.markers, *drops))
        self._marker_starts = frozenset(m[0] for m in (*spec.markers, *drops) if m)
        self._piece = lru_cache(maxsize=4096)(decode_piece)

    # -- regimes -----------------------------------------------------------------------

    def start(self, prompt_token_ids: Sequence[int] = (), *, streaming: bool) -> ReasoningCount:
        phase = self.parser.initial_state(prompt_token_ids).phase  # type: ignore[attr-defined]
        if phase.value == "verbatim":  # thinking off: no reasoning phase exists
            return ReasoningCount(phase=C, ended=True)
        live = streaming and not self.parser.is_reasoning_end(prompt_token_ids)
        return ReasoningCount(phase=CountPhase(phase.value), live=live)

    def needs_text(self, state: ReasoningCount) -> bool:
        return state.live and not state.ended

    def fold(self, state: ReasoningCount, token_ids: Sequence[int], text: str = ""
             ) -> ReasoningCount:
        state = self.check(state)
        if state.ended or not token_ids:
            return state
        if state.live:
            return self._fold_live(state, token_ids, text)
        return self._fold_tokens(state, token_ids)

    def finish(self, state: ReasoningCount) -> ReasoningCount:
        state = self.check(state)
        return self._finish_live(state) if state.live else state

    # -- token level ---------------------------------------------------------------------

    def _fold_tokens(self, state: ReasoningCount, token_ids: Sequence[int]) -> ReasoningCount:
        phase, count = state.phase, state.count
        for token_id in token_ids:
            kind = self._kinds.get(token_id)
            if kind is None:
                count += phase is R
            elif kind != _DROP:
                phase = self._transitions.get((phase, kind), (phase, False))[0]
        return state.replace(phase=phase, count=count)

    # -- live: vLLM's TokenIDScanner and IncrementalLexer, as far as counting sees them --------
    #
    # A step becomes items: text (with the tokens it carries and, when known, their decoded
    # texts) and marker tokens. Marker tokens whose text the step's text lacks wait
    # (`deferred_*`) until it arrives; the text meanwhile waits in `post_text`.

    def _fold_live(self, state: ReasoningCount, token_ids: Sequence[int], text: str
                   ) -> ReasoningCount:
        if text and not state.held and not state.deferred_ids and \
                self._marker_starts.isdisjoint(text) and \
                not any(t in self._kinds for t in token_ids):
            # Plain text that cannot start a marker: every token is emitted now (the
            # engine's own fast path).
            counted = self._counted(state, len(token_ids))
            return state.replace(count=state.count + counted) if counted else state
        state, items = self._scan(state, token_ids, text)
        state = self._process(state, items)
        if state.ended:  # DelegatingParser flushes the parser (finish_streaming) and stops
            state = self._finish_live(state)
        return state

    def _scan(self, state: ReasoningCount, token_ids: Sequence[int], text: str
              ) -> tuple[ReasoningCount, list[_Item]]:
        items: list[_Item] = []
        trailing = 0
        if state.deferred_ids:
            state, items, text, trailing = self._resolve(state, text, len(token_ids))
        if not any(t in self._kinds for t in token_ids):
            if text:
                pieces = tuple(self._piece(t) for t in token_ids)
                items.append(_Text(text, pieces, trailing + len(pieces)))
            return state, items  # no text: these tokens are never counted
        results = self._split_at_markers(token_ids)
        if trailing:
            results.insert(0, _Text("", None, trailing))
        if not text:  # every marker waits for its text, with the tokens counted before it
            ids, counts, before = list(state.deferred_ids), list(state.deferred_counts), 0
            for item in results:
                if isinstance(item, _Text):
                    before += item.n_tokens
                else:
                    ids.append(item.token_id)
                    counts.append(before)
                    before = 0
            return state.replace(deferred_ids=tuple(ids), deferred_counts=tuple(counts),
                                 trailing=state.trailing + before), items
        state, results = self._align(state, text, results)
        return state, items + results

    def _split_at_markers(self, token_ids: Sequence[int]) -> list[_Item]:
        results: list[_Item] = []
        group: list[str] = []
        for token_id in [*token_ids, None]:
            if token_id is not None and token_id not in self._kinds:
                group.append(self._piece(token_id))
                continue
            if "".join(group):  # a group whose tokens decode to nothing is dropped
                results.append(_Text("".join(group), tuple(group), len(group)))
            group = []
            if token_id is not None:
                results.append(_Marker(token_id, self._piece(token_id)))
        return results

    def _resolve(self, state: ReasoningCount, text: str, step_tokens: int
                 ) -> tuple[ReasoningCount, list[_Item], str, int]:
        """Waiting markers meet the new text; the text left over and the trailing count."""
        items: list[_Item] = []
        remaining, post = state.post_text + text, ""
        still: list[tuple[int, int]] = []
        for token_id, before in zip(state.deferred_ids, state.deferred_counts, strict=True):
            piece = self._piece(token_id)
            at = remaining.find(piece)
            if at > 0:
                items.append(_Text(remaining[:at], None, before))
            if at >= 0:  # at 0 the tokens counted before the marker are dropped
                items.append(_Marker(token_id, piece))
                remaining = remaining[at + len(piece):]
                continue
            if remaining:
                post += remaining
                before += step_tokens
                remaining = ""
            still.append((token_id, before))
        trailing = 0 if still else state.trailing
        state = state.replace(deferred_ids=tuple(t for t, _ in still),
                              deferred_counts=tuple(c for _, c in still), post_text=post,
                              trailing=state.trailing if still else 0)
        return state, items, remaining, trailing

    def _align(self, state: ReasoningCount, text: str, results: list[_Item]
               ) -> tuple[ReasoningCount, list[_Item]]:
        """The step's text against the decoded tokens (the scanner's hold-back recovery)."""
        joined = "".join(r.text for r in results)
        if not joined:
            return state, [_Text(text, None, 0), *results]
        at = text.find(joined)
        if at >= 0:  # text before it was held back by the detokenizer: it carries no tokens
            return state, ([_Text(text[:at], None, 0)] if at else []) + results
        return self._anchor(state, text, results)

    def _anchor(self, state: ReasoningCount, text: str, results: list[_Item]
                ) -> tuple[ReasoningCount, list[_Item]]:
        """Cut the text at the markers' texts, found right to left; a marker not found waits."""
        markers = [r for r in results if isinstance(r, _Marker)]
        pieces: list[list[str]] = [[] for _ in range(len(markers) + 1)]
        counts = [0] * (len(markers) + 1)
        group = 0
        for item in results:
            if isinstance(item, _Marker):
                group += 1
            else:
                pieces[group] += item.pieces or ()
                counts[group] += item.n_tokens
        positions = [-1] * len(markers)
        end = len(text)
        for k in range(len(markers) - 1, -1, -1):
            found = text.rfind(markers[k].text, 0, end)
            if found >= 0:
                positions[k] = end = found
        out: list[_Item] = []
        waiting: list[tuple[int, int]] = []
        post, consumed = "", 0
        for k, marker in enumerate(markers):
            if positions[k] >= consumed:
                if positions[k] > consumed:
                    out.append(_Text(text[consumed:positions[k]], tuple(pieces[k]), counts[k]))
                out.append(marker)
                consumed = positions[k] + len(marker.text)
                continue
            later = any(p >= 0 for p in positions[k + 1:])
            if not later and consumed < len(text) and self._kinds[marker.token_id] != _DROP:
                post, consumed = text[consumed:], len(text)
            waiting.append((marker.token_id, counts[k]))
        if consumed < len(text):
            out.append(_Text(text[consumed:], tuple(pieces[-1]), counts[-1]))
        return state.replace(
            deferred_ids=state.deferred_ids + tuple(t for t, _ in waiting),
            deferred_counts=state.deferred_counts + tuple(c for _, c in waiting),
            post_text=state.post_text + post), out

    def _process(self, state: ReasoningCount, items: list[_Item]) -> ReasoningCount:
        for item in items:
            if isinstance(item, _Marker):  # the lexer is flushed before a marker applies
                state = self._apply(self._flush(state), self._kinds[item.token_id])
            elif item.text:
                state = self._lex(state, item)
            else:  # tokens without text: counted in the current phase at once
                state = state.replace(count=state.count + self._counted(state, item.n_tokens))
        return state

    def _finish_live(self, state: ReasoningCount) -> ReasoningCount:
        """The engine's finish(): waiting markers and text are processed, the lexer flushed."""
        items: list[_Item] = []
        if state.post_text:
            items.append(_Text(state.post_text, None, state.deferred_counts[0]
                               if state.deferred_counts else 0))
        items += [_Marker(t, self._piece(t)) for t in state.deferred_ids]
        if state.trailing:
            items.append(_Text("", None, state.trailing))
        state = state.replace(deferred_ids=(), deferred_counts=(), post_text="", trailing=0)
        return self._flush(self._process(state, items))

    def _counted(self, state: ReasoningCount, n: int) -> int:
        return n if state.phase is R else 0

    def _apply(self, state: ReasoningCount, kind: Any) -> ReasoningCount:
        if kind == _DROP:
            return state
        phase, ends = self._transitions.get((state.phase, kind), (state.phase, False))
        if phase is T:  # skip_tool_parsing: a tool marker never enters the tool phase
            phase = C if ends else state.phase
        return state.replace(phase=phase, ended=state.ended or ends)

    def _lex(self, state: ReasoningCount, item: _Text) -> ReasoningCount:
        """Feed text to the lexer: count the tokens whose first character it emits."""
        base, text = len(state.held), item.text
        offsets = list(state.held_offsets)
        placed, pos = 0, 0
        for piece in item.pieces or ():
            found = text.find(piece, pos) if piece else -1
            if found >= 0:
                offsets.append(base + found)
                placed += 1
                pos = found + len(piece)
        offsets += [base] * max(item.n_tokens - placed, 0)  # the rest: the text's first character
        buffer = state.held + text
        _, held = self._markers.split(buffer, final=False)
        cut = len(buffer) - len(held)
        emitted = sum(1 for o in offsets if o < cut)
        return state.replace(count=state.count + self._counted(state, emitted), held=held,
                             held_offsets=tuple(o - cut for o in offsets if o >= cut))

    def _flush(self, state: ReasoningCount) -> ReasoningCount:
        """The lexer emits what it holds, in the current phase."""
        if not state.held and not state.held_offsets:
            return state
        return state.replace(count=state.count + self._counted(state, len(state.held_offsets)),
                             held="", held_offsets=())


# gpt-oss (HarmonyParser.count_reasoning_tokens): ids of the Harmony vocabulary's special
# tokens start here (o200k_base has 199,998 ordinary tokens), and the structural ones.
_HARMONY_FIRST_SPECIAL = 199998
_H_START, _H_MESSAGE = 200006, 200008
_H_STOPS = frozenset({200002, 200007, 200012})  # <|return|>, <|end|>, <|call|>
# Sub-phases kept in ReasoningCount.depth; ReasoningCount.held is the header text so far and
# `ended` says the header's role is no longer preset to assistant.
_H_HEAD, _H_BODY, _H_IDLE = 0, 1, 2


class _HarmonyCounter(ReasoningTokenCounter):
    """vLLM's HarmonyParser count: a token counts when, once it is read, the message is on
    the analysis channel or is commentary to a recipient, and it is no special token. A
    stream counts the same tokens (vLLM feeds every token to one parser)."""

    def __init__(self, decode_piece: Callable[[int], str]) -> None:
        self.decode_piece = decode_piece

    def fold(self, state: ReasoningCount, token_ids: Sequence[int], text: str = ""
             ) -> ReasoningCount:
        from parsers.harmony import (
            MAX_HEADER_CHARS,
            HeaderError,
            _normalize_recipient,
            parse_header,
        )

        state = self.check(state)
        sub, head, count, phase, fixed = state.depth, state.held, state.count, state.phase, state.ended
        for token_id in token_ids:
            if sub == _H_HEAD:
                if token_id != _H_MESSAGE:
                    head = (head + self.decode_piece(token_id))[:MAX_HEADER_CHARS]
                    continue
                try:
                    header = parse_header(head, not fixed)
                except HeaderError:
                    sub, head = _H_IDLE, ""
                    continue
                recipient = _normalize_recipient(header.recipient)
                counted = header.channel == "analysis" or (
                    header.channel == "commentary" and recipient is not None)
                sub, head, fixed = _H_BODY, "", True
                phase = CountPhase.REASONING if counted else CountPhase.CONTENT
            elif sub == _H_BODY:
                if token_id in _H_STOPS:
                    sub, phase = _H_IDLE, CountPhase.CONTENT
                elif phase is CountPhase.REASONING and token_id < _HARMONY_FIRST_SPECIAL:
                    count += 1
            elif token_id == _H_START:
                sub, head = _H_HEAD, ""
        return state.replace(depth=sub, held=head, count=count, phase=phase, ended=fixed)


# Muse Spark (MuseReasoningParser.count_reasoning_tokens): a `<|message|>` token opens a body,
# counted when the text since the last marker ends in no `to=RCPT` or `to=self`; `<|eom|>` /
# `<|eot|>` / `<|start|>` end it. The header text is kept as a window (recipients are short).
_MUSE_RCPT = re.compile(r"to=(?P<recipient>[^\s<]+)\s*$")
_MUSE_WINDOW = 512


class _MuseCounter(ReasoningTokenCounter):
    def __init__(self, vocab: Any, decode_piece: Callable[[int], str]) -> None:
        ids = {m: vocab.token_to_id(m) for m in ("<|message|>", "<|eom|>", "<|eot|>", "<|start|>")}
        self.message_id = ids.pop("<|message|>")
        self.boundary_ids = frozenset(i for i in ids.values() if i is not None)
        self.decode_piece = decode_piece

    def fold(self, state: ReasoningCount, token_ids: Sequence[int], text: str = ""
             ) -> ReasoningCount:
        state = self.check(state)
        count, inside, header = state.count, state.depth, state.held
        for token_id in token_ids:
            if token_id == self.message_id:
                found = _MUSE_RCPT.search(header)
                inside = int(found is None or found.group("recipient") == "self")
                header = ""
            elif token_id in self.boundary_ids:
                inside, header = 0, ""
            else:
                if inside:
                    count += 1
                header = (header + self.decode_piece(token_id))[-_MUSE_WINDOW:]
        return state.replace(depth=inside, held=header, count=count)


def reasoning_token_counter(parser: ReasoningParser,
                            decode_piece: Callable[[int], str] | None = None
                            ) -> ReasoningTokenCounter:
    """The counter for one of our reasoning parser objects (built for the request's settings).

    `decode_piece(token_id)` is one token decoded alone, as vLLM's engine decodes it
    (`tokenizer.decode([id])`, special tokens kept); the default uses the parser's vocabulary
    when it is a `tokenizers.Tokenizer`.
    """
    name = parser.name
    if name == "granite":
        return ReasoningTokenCounter()
    if name == "openai_gptoss":
        return _HarmonyCounter(decode_piece or _vocab_decoder(parser.vocab))
    if name in ("muse", "musespark1x"):
        return _MuseCounter(parser.vocab, decode_piece or _vocab_decoder(parser.vocab))
    if name in ("deepseek_r1", "deepseek_v3"):
        if not getattr(parser, "thinking", True):
            return ReasoningTokenCounter()  # deepseek_v3 thinking off: IdentityReasoningParser
        return _DepthCounter(parser.start_token_id, parser.end_token_id)  # type: ignore[attr-defined]
    if name in ("minimax_m2_append_think", "muse_glimmer"):  # the base ReasoningParser method: always 0
        return ReasoningTokenCounter()
    if name == "minimax_m3":  # its own depth count over <mm:think>, open from the start when
        prefilled = parser.chat_template_kwargs.get("thinking_mode") == "enabled"  # prefilled
        return _DepthCounter(parser.vocab.token_to_id("<mm:think>"),
                             parser.vocab.token_to_id("</mm:think>"), depth=int(prefilled))
    if name in ("cohere_command3", "cohere_command4"):  # CohereCommandParser's depth count
        return _DepthCounter(parser.start_id, parser.end_id)  # type: ignore[attr-defined]
    if name == "kimi_k3":  # KimiK3ReasoningParser's own scan over its 3-token markers
        return _XtmlCounter(parser) if getattr(parser, "thinking", True) else ReasoningTokenCounter()
    if name == "k2_horizon":  # a DeepSeekR1ReasoningParser over the effort's think markers
        return _DepthCounter(parser.start_token_id, parser.end_token_id)  # type: ignore[attr-defined]
    family = _FAMILIES.get(name)
    if family is None:
        raise ParserConfigError(f"no reasoning token counter for parser {name!r}")
    if name == "mistral" and getattr(parser, "encoding", None) != "special_token":
        return ReasoningTokenCounter()  # no [THINK] tokens: see the module doc's known gaps
    return _EngineCounter(parser, family, decode_piece or _vocab_decoder(parser.vocab))


def _vocab_decoder(vocab: Any) -> Callable[[int], str]:
    decode = getattr(vocab, "decode", None)
    if decode is None:
        raise ParserConfigError("counting reasoning tokens needs a tokenizer that decodes")

    def piece(token_id: int) -> str:
        text: str = decode([token_id], skip_special_tokens=False)
        return text

    return piece
