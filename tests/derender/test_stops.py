"""The streaming stop-string scan equals the batch cut on every split (property test)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from render_service.derender.stops import StopScan, cut_text, find_stop

ALPHABET = "ab\nS😀"


def _batch(pieces: list[str], stops: tuple[str, ...], include: bool, min_tokens: int):  # noqa: ANN202
    head = "".join(pieces[:min_tokens])
    text = "".join(pieces)
    tail = text[len(head) :]
    match = find_stop(text, len(head), stops) if tail else None
    return (cut_text(text, match, include), match[0]) if match else (text, None)


def _stream(pieces: list[str], stops: tuple[str, ...], include: bool, min_tokens: int, split: int):  # noqa: ANN202
    scan = StopScan(stops, include, min_tokens)
    state = scan.initial_state()
    out = []
    groups = [pieces[i : i + split] for i in range(0, len(pieces), split)]
    for group in groups:
        before = min(scan.tokens_before_min(state), len(group))
        for part in (group[:before], group[before:]):
            if not part:
                continue
            result = scan.feed(state, "".join(part), len(part))
            state = result.state
            out.append(result.released)
            if result.stop is not None:
                return "".join(out), result.stop
    state, held = scan.flush(state)
    return "".join(out) + held, None


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(st.text(ALPHABET, max_size=3), max_size=20),
    stops=st.lists(st.text(ALPHABET, min_size=1, max_size=4), min_size=1, max_size=3),
    include=st.booleans(),
    min_tokens=st.integers(0, 6),
    split=st.integers(1, 5),
)
def test_stream_scan_equals_batch(pieces, stops, include, min_tokens, split):  # noqa: ANN001
    stops = tuple(stops)
    assert _stream(pieces, stops, include, min_tokens, split) == _batch(pieces, stops, include, min_tokens)


def test_only_possible_prefix_is_held():
    scan = StopScan(("STOP", "xyz"), False, 0)
    result = scan.feed(scan.initial_state(), "hello ST", 1)
    assert result.released == "hello " and result.stop is None
    result = scan.feed(result.state, "AY", 1)
    assert result.released == "STAY"


def test_tail_shorter_than_longest_stop_keeps_the_held_prefix():
    # Regression: with less text than the longest stop string, the tail slice wrapped around.
    scan = StopScan(("SSSS",), False, 0)
    result = scan.feed(scan.initial_state(), "SS", 1)
    assert result.released == "" and result.state.tail == "SS" and result.state.held == 2
    result = scan.feed(result.state, "a", 1)
    assert result.released == "SSa" and result.stop is None
