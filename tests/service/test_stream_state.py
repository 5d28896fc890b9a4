"""The stream_state envelope: round trip, tamper evidence, binding, bounds, age."""

from __future__ import annotations

import base64
import zlib

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from render_service.derender.stream_state import STATE_VERSION, StreamStateCodec
from render_service.errors import BadRequestError, StreamStateError

CODEC = StreamStateCodec(secret=b"k" * 32, max_bytes=64 * 1024)
STATE = {"parser": {"v": 1, "phase": "reasoning", "held": "</thi"}, "role_sent": True, "n": 7}


def test_round_trip_returns_the_state_with_its_issue_time() -> None:
    """A state encoded for a binding decodes to the same content under that binding."""
    wire = CODEC.encode(STATE, binding="req-1:0", now=1000)
    decoded = CODEC.decode(wire, binding="req-1:0", now=1001)
    assert decoded == {**STATE, "issued_at": 1000}


def test_wire_value_is_a_json_object_with_one_opaque_string() -> None:
    """Clients see {"rs": "<version>.<payload>.<mac>"} and nothing else."""
    wire = CODEC.encode(STATE, binding="b")
    assert list(wire) == ["rs"]
    assert wire["rs"].startswith(f"{STATE_VERSION}.")
    assert orjson.loads(orjson.dumps(wire)) == wire


def test_state_replayed_into_another_request_is_rejected() -> None:
    """The MAC binds the state to its stream: another request id or choice index fails."""
    wire = CODEC.encode(STATE, binding="req-1:0")
    for other in ("req-2:0", "req-1:1"):
        with pytest.raises(StreamStateError, match="signature mismatch"):
            CODEC.decode(wire, binding=other)


def test_state_signed_with_another_secret_is_rejected() -> None:
    """A replica with another secret (or a forger without it) cannot produce a valid state."""
    wire = StreamStateCodec(secret=b"x" * 32, max_bytes=1 << 16).encode(STATE, binding="b")
    with pytest.raises(StreamStateError, match="signature mismatch"):
        CODEC.decode(wire, binding="b")


def test_forged_payload_with_old_mac_is_rejected() -> None:
    """Swapping in a different payload under a valid tag fails."""
    version, _, tag = CODEC.encode(STATE, binding="b")["rs"].split(".")
    forged = base64.urlsafe_b64encode(zlib.compress(b'{"role_sent":false}')).rstrip(b"=").decode()
    with pytest.raises(StreamStateError):
        CODEC.decode({"rs": f"{version}.{forged}.{tag}"}, binding="b")


@pytest.mark.parametrize(
    "wire, message",
    [
        (None, "expected the object"),
        ("1.abc.def", "expected the object"),
        ({"prev_tokens": [], "prefix_offset": 0}, "expected the object"),  # a vLLM-format state
        ({"rs": "1.abc"}, "malformed"),
        ({"rs": "2.abc.def"}, "version '2' is not supported"),
        ({"rs": 5}, "expected the object"),
    ],
)
def test_malformed_foreign_or_future_states_are_rejected(wire: object, message: str) -> None:
    """Shapes other than our envelope fail with a message that says why."""
    with pytest.raises(StreamStateError, match=message):
        CODEC.decode(wire, binding="b")


def test_truncated_state_is_rejected() -> None:
    """Cutting the token anywhere yields a typed error."""
    token = CODEC.encode(STATE, binding="b")["rs"]
    for cut in range(1, len(token), 7):
        with pytest.raises(StreamStateError):
            CODEC.decode({"rs": token[:cut]}, binding="b")


def test_oversized_state_is_rejected_before_decoding() -> None:
    """A token longer than max_bytes is refused without touching the MAC or zlib."""
    small = StreamStateCodec(secret=b"k" * 32, max_bytes=10)
    with pytest.raises(StreamStateError, match="larger than 10 bytes"):
        small.decode(CODEC.encode(STATE, binding="b"), binding="b")


def test_stale_state_is_rejected() -> None:
    """States older than max_age_s are refused."""
    codec = StreamStateCodec(secret=b"k" * 32, max_bytes=1 << 16, max_age_s=60)
    wire = codec.encode(STATE, binding="b", now=1000)
    assert codec.decode(wire, binding="b", now=1060)["n"] == 7
    with pytest.raises(StreamStateError, match="expired"):
        codec.decode(wire, binding="b", now=1061)


@settings(max_examples=300, deadline=None)
@given(position=st.integers(min_value=0), replacement=st.characters(codec="ascii"))
def test_any_single_character_corruption_is_a_typed_error_or_harmless(position: int, replacement: str) -> None:
    """Corrupting one character gives StreamStateError (or, if unchanged, the same state)."""
    token = CODEC.encode(STATE, binding="b", now=5)["rs"]
    index = position % len(token)
    corrupted = token[:index] + replacement + token[index + 1 :]
    try:
        decoded = CODEC.decode({"rs": corrupted}, binding="b", now=5)
    except StreamStateError:
        return
    assert decoded == {**STATE, "issued_at": 5}


@settings(max_examples=100, deadline=None)
@given(state=st.dictionaries(st.text(max_size=8), st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)))
def test_any_json_state_round_trips(state: dict) -> None:
    """Every JSON object survives encode/decode unchanged."""
    state.pop("issued_at", None)
    wire = CODEC.encode(state, binding="b", now=9)
    assert CODEC.decode(wire, binding="b", now=9) == {**state, "issued_at": 9}


def test_zip_bomb_payload_is_rejected() -> None:
    """A tiny payload that inflates past the bound fails instead of allocating it."""
    bomb = base64.urlsafe_b64encode(zlib.compress(b"[" + b"0," * 400_000 + b"0]", 9)).rstrip(b"=").decode()
    small = StreamStateCodec(secret=b"k" * 32, max_bytes=8 * 1024)
    assert len(bomb) < 8 * 1024
    tag = small._mac("b", bomb)
    with pytest.raises(StreamStateError, match="too large"):
        small.decode({"rs": f"1.{bomb}.{tag}"}, binding="b")


def _noise(n: int, seed: int) -> str:
    """n characters that zlib cannot shrink much (so the token grows with n)."""
    import random

    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))


@pytest.mark.parametrize(
    "state, which",
    [
        ({"tools": _noise(20_000, 1)}, "encoded"),  # incompressible: the token is too long
        ({"tools": "a" * (8 * 4096)}, "inflated"),  # compresses to ~100 bytes, inflates past 8x
    ],
)
def test_encode_refuses_a_state_decode_would_refuse(state: dict, which: str) -> None:
    """A state over either bound is refused when issued (400 naming the flag), not a chunk later."""
    small = StreamStateCodec(secret=b"k" * 32, max_bytes=4096)
    with pytest.raises(BadRequestError, match=f"{which} limit.*--max-stream-state-bytes 4096") as err:
        small.encode(state, binding="b")
    assert not isinstance(err.value, StreamStateError)  # the client's state is not at fault


@settings(max_examples=60, deadline=None)
@given(size=st.integers(min_value=0, max_value=12_000), compressible=st.booleans())
def test_every_issued_state_is_accepted_back(size: int, compressible: bool) -> None:
    """Near the limits, encode either refuses or issues a state that decode accepts."""
    small = StreamStateCodec(secret=b"k" * 32, max_bytes=1024)
    state = {"tools": "a" * size if compressible else _noise(size, size)}
    try:
        wire = small.encode(state, binding="b", now=3)
    except BadRequestError as exc:
        assert "--max-stream-state-bytes" in str(exc)
        return
    assert small.decode(wire, binding="b", now=3) == {**state, "issued_at": 3}


def test_inflated_bound_is_exclusive_at_issue() -> None:
    """JSON one byte under max_bytes * 8 is issued and accepted; at the bound it is refused."""
    small = StreamStateCodec(secret=b"k" * 32, max_bytes=1024)
    overhead = len(orjson.dumps({"tools": "", "issued_at": 3}))
    under = {"tools": "a" * (8 * 1024 - 1 - overhead)}
    assert len(orjson.dumps({**under, "issued_at": 3})) == 8 * 1024 - 1
    assert small.decode(small.encode(under, binding="b", now=3), binding="b", now=3)["tools"] == under["tools"]
    with pytest.raises(BadRequestError, match="inflated limit"):
        small.encode({"tools": under["tools"] + "a"}, binding="b", now=3)
