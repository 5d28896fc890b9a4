"""Long realistic outputs per parser family, for bench/stream_parse.py `--case families`.

Each family's corpus entry (tests/parsers/family_outputs: its real chat template's markup
around a fixed reasoning sentence, content sentence and tool-call arguments) is grown to a
target length by replacing those fixed pieces with generated prose: the reasoning sentence,
the content before/after the calls, and the argument value "Tokyo" (plain ASCII words, so
no argument format needs escaping). The markup stays exactly the template's.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from tests.parsers.family_corpus import corpus_entries

__all__ = ["FamilyOutput", "grow_entry", "growable", "pick_entry"]

REASONING = 'The user asks about Tokyo (東京). I should call get_weather with city "Tokyo".'
CONTENT = "It is 18 °C and sunny in 東京 today ☀️."
LEAD = "Let me check both for you."
TRAIL = "Anything else? 😀"
ARG = "Tokyo"

_PROSE = ("the forecast for the coming week suggests we compare several cities before "
          "deciding where to travel considering temperature rain wind and flight prices "
          "让我想想 天气 东京 巴黎 旅行 计划 😀 🌧️ ☀️ ✈️ 42 3.14").split()  # fmt: skip
_ASCII = [w for w in _PROSE if w.isascii() and w.isalpha()]

# slot -> (share of the added tokens, words)
_SLOTS: dict[str, tuple[float, list[str]]] = {
    REASONING: (0.6, _PROSE), CONTENT: (0.2, _PROSE), LEAD: (0.15, _PROSE),
    TRAIL: (0.05, _PROSE), ARG: (0.2, _ASCII),
}


@dataclass(frozen=True)
class FamilyOutput:
    entry: str
    text: str
    prompt: str | None


def _prose(n_tokens: int, words: list[str], count: Callable[[str], int], seed: int) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    while count(" ".join(out)) < n_tokens:
        out.extend(rng.choice(words) for _ in range(16))
    return " ".join(out)


# Entries from vLLM's tests carry their own sentences: one between two markup tags is prose.
_SENTENCE = re.compile(r"(?<=>)[A-Z][A-Za-z ,']+\.(?=<)")


def _slots(text: str) -> dict[str, tuple[float, list[str]]]:
    rest = text.replace(REASONING, "")  # its "Tokyo" is no argument
    present = {s: v for s, v in _SLOTS.items() if s in (text if s == REASONING else rest)}
    return present or {m: (1.0, _PROSE) for m in dict.fromkeys(_SENTENCE.findall(text))}


def growable(text: str) -> bool:
    """Has `text` a piece `grow_entry` can replace with prose?"""
    return bool(_slots(text))


def grow_entry(text: str, target_tokens: int, count: Callable[[str], int]) -> str:
    """`text` with its fixed pieces replaced by prose, about `target_tokens` long."""
    present = _slots(text)
    missing = target_tokens - count(text)
    if not present or missing <= 0:
        return text
    total = sum(share for share, _ in present.values())
    grown = text.replace(REASONING, "\0R") if REASONING in present else text
    for seed, (slot, (share, words)) in enumerate(present.items()):
        fill = _prose(int(missing * share / total), words, count, seed)
        grown = grown.replace("\0R" if slot == REASONING else slot, fill + slot[-1] * (slot[-1] == "."))
    return grown


def pick_entry(kind: str, name: str, score: Callable[[dict], tuple[int, ...]]) -> FamilyOutput:
    """The family's corpus entry with the highest `score(entry)`."""
    best = max(corpus_entries(kind, name), key=score)
    return FamilyOutput(best["name"], best["text"], best.get("prompt"))
