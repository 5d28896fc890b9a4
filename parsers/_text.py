"""Text helpers shared by the reasoning families and the combined parser.

* `MarkerSet`: leftmost-longest scanning for literal markers over streamed text. It is the
  text-mode behaviour of vLLM's parser-engine lexer (`IncrementalLexer` fed without token
  ids, as `extract_reasoning` does): at each position the longest marker that matches wins,
  otherwise the character is plain text. While streaming, a tail that may still grow into a
  marker is held back (at most the longest marker minus one character), so scanning any split
  of a text yields the same segments as scanning the whole text.
* held whitespace (`ws_runs_*`): a run-length encoded whitespace buffer. Some batch rules
  depend on whether text that *follows* a whitespace run exists (trailing reasoning
  whitespace is stripped, content made only of whitespace becomes null), so a stream must
  hold such whitespace until it knows. Holding it costs one character (plus a count) per
  change of character, so a model stuck emitting newlines keeps a tiny state. The buffer is
  bounded by MAX_WS_RUNS stored characters, the ceiling of an in-flight tool call: batch
  parsing has no such limit, so a lower one would make a stream fail where batch succeeds.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

from parsers._errors import LimitExceededError
from parsers.tools._base import MAX_TOOL_CALL_CHARS

__all__ = ["MarkerSet", "Segment", "ws_runs_append", "ws_runs_text", "MAX_WS_RUNS"]

# Runs (stored characters) a held whitespace buffer may contain; a run of any length is one.
# Real outputs have a few ("\n\n", "  \n"), but alternating whitespace (" \n" repeated) makes
# one run per character, so the bound is the one of the other buffer allowed to grow with the
# output, an in-flight tool call (parsers/tools/_base.py MAX_TOOL_CALL_CHARS, 512 Ki chars).
MAX_WS_RUNS = MAX_TOOL_CALL_CHARS

_REPEATED_CHAR = re.compile(r"(.)\1", re.DOTALL)  # two adjacent runs of one character

Segment = tuple[str, bool]  # (text, is_marker)


class MarkerSet:
    """Leftmost-longest literal scanner with streaming hold-back of partial markers."""

    def __init__(self, markers: Iterable[str]) -> None:
        literals = sorted({m for m in markers if m}, key=lambda m: (-len(m), m))
        self.markers = tuple(literals)
        self.max_len = max((len(m) for m in literals), default=0)
        self._pattern = re.compile("|".join(re.escape(m) for m in literals)) if literals else None
        self._prefixes = frozenset(m[:i] for m in literals for i in range(1, len(m)))

    def split(self, text: str, *, final: bool) -> tuple[list[Segment], str]:
        """Segments of `text` that are decided, and the tail held back (empty when final)."""
        if self._pattern is None:
            return ([(text, False)] if text else []), ""
        holds = [] if final else self._hold_candidates(text)
        segments: list[Segment] = []
        pos = 0
        while True:
            hold = next((h for h in holds if h >= pos), len(text))
            match = self._pattern.search(text, pos, hold + self.max_len)
            if match is None or match.start() >= hold:
                if hold > pos:
                    segments.append((text[pos:hold], False))
                return segments, text[hold:]
            if match.start() > pos:
                segments.append((text[pos : match.start()], False))
            segments.append((match.group(), True))
            pos = match.end()

    def _hold_candidates(self, text: str) -> list[int]:
        """Offsets p where text[p:] is a proper prefix of a marker (could still become one)."""
        start = max(0, len(text) - self.max_len + 1)
        return [p for p in range(start, len(text)) if text[p:] in self._prefixes]


def partial_marker_len(text: str, markers: Iterable[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of one of `markers`."""
    best = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:k]):
                best = k
                break
    return best


def ws_runs_append(chars: str, counts: tuple[int, ...], text: str) -> tuple[str, tuple[int, ...]]:
    """Append whitespace `text` to a run-length encoded buffer (chars[i] repeated counts[i])."""
    runs = [(ch, len(list(group))) for ch, group in itertools.groupby(text)]
    if not runs:
        return chars, counts
    if chars and chars[-1] == runs[0][0]:
        counts = (*counts[:-1], counts[-1] + runs[0][1])
        runs = runs[1:]
    if len(chars) + len(runs) > MAX_WS_RUNS:
        raise LimitExceededError(f"held whitespace has more than {MAX_WS_RUNS} runs")
    return chars + "".join(ch for ch, _ in runs), counts + tuple(n for _, n in runs)


def ws_runs_text(chars: str, counts: tuple[int, ...]) -> str:
    return "".join(ch * n for ch, n in zip(chars, counts))


def check_ws_runs(chars: str, counts: tuple[int, ...]) -> None:
    """Invariant for states holding runs (raise ValueError -> StateError in from_json)."""
    if len(chars) != len(counts) or len(chars) > MAX_WS_RUNS:
        raise ValueError("malformed whitespace runs")
    if chars and (min(counts) <= 0 or not chars.isspace() or _REPEATED_CHAR.search(chars)):
        raise ValueError("malformed whitespace runs")
