"""JsonValue (parsers/tools/_json_value.py): vLLM's per-value rule `json.dumps(json.loads(raw)
or raw)` as a stream. Exact for values up to HOLD_CHARS and for any value that is JSON or
cannot be JSON from its first HOLD_CHARS characters; the same output under every split with
the state JSON round-tripped; a bounded state on long values."""

from __future__ import annotations

import json
import random

import pytest

from parsers.tools._json_value import HOLD_CHARS, JsonValue, JsonValueState

WRITER = JsonValue(512 * 1024)
ATOMS = ["1", "-2.5e3", "true", "null", "NaN", '"a\\u00e9\\n"', '"x"', " ", "\n", "{", "}", "[", "]",
         ",", ":", '"k"', "abc", "0", "01", "1.", "-", "Infinity", "tru", "é", "\\", '"\\ud83d\\ude00"',
         '"\\ud800"', "\x01"]  # fmt: skip


def vllm(raw: str) -> str:
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return json.dumps(value, ensure_ascii=False)


def streamed(raw: str, cuts: list[int]) -> tuple[str, int]:
    """(output, largest state) over `raw` split at `cuts`, the state round-tripped."""
    state, out, biggest, prev = WRITER.start(), [], 0, 0
    for cut in [*cuts, len(raw)]:
        state, text = WRITER.feed(state, raw[prev:cut])
        state = JsonValueState.from_json(json.loads(json.dumps(state.to_json())))
        out.append(text)
        biggest, prev = max(biggest, len(json.dumps(state.to_json()))), cut
    _, text = WRITER.end(state)
    return "".join(out) + text, biggest


def test_short_values_are_vllms_and_split_invariant() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        raw = "".join(rng.choice(ATOMS) for _ in range(rng.randint(0, 14)))
        whole, _ = streamed(raw, [])
        assert whole == vllm(raw), raw
        assert streamed(raw, list(range(1, len(raw))))[0] == whole, raw
        cuts = sorted(rng.sample(range(1, len(raw)), min(5, len(raw) - 1))) if len(raw) > 1 else []
        assert streamed(raw, cuts)[0] == whole, (raw, cuts)


@pytest.mark.parametrize("raw", [
    json.dumps({"rows": [{"id": i, "s": "é\n\"", "f": i / 3, "n": None} for i in range(40)]}, indent=2),
    "  " + json.dumps(["x" * 50] * 20) + " \n",
    json.dumps("a long string \\ \" é " * 40),
    "def f(x):\n    return {x: [x, 'y']}\n" * 20,  # not JSON: a string
    "[1, 2, 3] is a list " * 30,  # not JSON within HOLD_CHARS: a string
])
def test_long_values_stream_exactly(raw: str) -> None:
    assert len(raw) > HOLD_CHARS
    whole, _ = streamed(raw, [])
    assert whole == vllm(raw)
    assert streamed(raw, list(range(1, len(raw))))[0] == whole
    assert streamed(raw, list(range(1, len(raw), 7)))[0] == whole


@pytest.mark.parametrize(("raw", "tail"), [
    ("[" + "1, " * 100 + "x]", "x]"),  # a fault inside
    ('{"a": "' + "y" * 300 + '"}  trailing', "  trailing"),  # text after its end
    ("[" + "1, " * 100, ", "),  # cut by its close marker
])
def test_long_value_that_stops_being_json_keeps_canonical_then_raw(raw: str, tail: str) -> None:
    """The named divergence: canonical text up to the fault, then the raw text."""
    whole, _ = streamed(raw, [])
    assert whole != vllm(raw) and whole.endswith(tail)
    assert streamed(raw, list(range(1, len(raw))))[0] == whole


def test_state_stays_small_on_a_long_object() -> None:
    raw = json.dumps({"rows": [{"id": i, "name": f"row {i}", "tags": ["a", "b"]} for i in range(400)]})
    out, biggest = streamed(raw, list(range(1, len(raw), 3)))
    assert out == vllm(raw) and len(raw) > 20000
    assert biggest < 1024, biggest
