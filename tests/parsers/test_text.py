"""MarkerSet: scanning any split of a text gives the segments of scanning it whole."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from parsers._text import MarkerSet, ws_runs_append, ws_runs_text

MARKERS = ("ab", "abc", "bcd", "c", "</think>", "<think>", ">")
SET = MarkerSet(MARKERS)


def _reference(text: str) -> list[tuple[str, bool]]:
    """Leftmost-longest by brute force, merged like the scanner's plain runs."""
    out: list[tuple[str, bool]] = []
    i = 0
    while i < len(text):
        match = max((m for m in MARKERS if text.startswith(m, i)), key=len, default=None)
        if match:
            out.append((match, True))
            i += len(match)
        else:
            if out and not out[-1][1]:
                out[-1] = (out[-1][0] + text[i], False)
            else:
                out.append((text[i], False))
            i += 1
    return out


def _merge(segments):
    merged: list[tuple[str, bool]] = []
    for text, marker in segments:
        if merged and not marker and not merged[-1][1]:
            merged[-1] = (merged[-1][0] + text, False)
        elif text:
            merged.append((text, marker))
    return merged


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.text(alphabet="abcd<>/thinkx ", max_size=6), max_size=8))
def test_split_scan_equals_whole_scan(parts: list[str]) -> None:
    text = "".join(parts)
    held, segments = "", []
    for part in parts:
        out, held = SET.split(held + part, final=False)
        assert len(held) < SET.max_len
        segments += out
    out, held = SET.split(held, final=True)
    assert held == ""
    segments += out
    assert _merge(segments) == _reference(text)


@given(st.lists(st.sampled_from([" ", "\n", "\t", "\u3000"]), max_size=40))
def test_whitespace_runs_round_trip(chars: list[str]) -> None:
    runs = ("", ())
    for ch in chars:
        runs = ws_runs_append(*runs, ch)
    assert ws_runs_text(*runs) == "".join(chars)
    assert not re.search(r"(.)\1", runs[0])
