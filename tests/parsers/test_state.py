"""JsonState codec strictness: the version and list items must have their exact JSON types."""

from __future__ import annotations

import pytest

from parsers import DetokState, StateError
from parsers.chat import ChatMode, ChatState


@pytest.mark.parametrize("version", [True, 1.0, "1", None, [1], 2, 0])
def test_version_must_be_the_exact_integer(version: object) -> None:
    data = {**DetokState(("a",), 0, 1).to_json(), "v": version}
    with pytest.raises(StateError, match="version"):
        DetokState.from_json(data)


def test_missing_version_is_a_state_error() -> None:
    data = DetokState().to_json()
    del data["v"]
    with pytest.raises(StateError, match="version"):
        DetokState.from_json(data)


def test_version_one_round_trips() -> None:
    state = ChatState(mode=ChatMode.AUTO, ws_chars=" \n", ws_counts=(2, 1))
    assert state.to_json()["v"] == 1
    assert ChatState.from_json(state.to_json()) == state


@pytest.mark.parametrize("counts", [[True, 1], [1.0, 1], ["1", 1], [1, None]])
def test_list_items_must_have_their_exact_type(counts: list) -> None:
    data = {**ChatState(mode=ChatMode.AUTO).to_json(), "ws_chars": " \n", "ws_counts": counts}
    with pytest.raises(StateError):
        ChatState.from_json(data)


@pytest.mark.parametrize("tokens", [[1], [None], [True], ["a", 2]])
def test_string_lists_reject_other_types(tokens: list) -> None:
    with pytest.raises(StateError):
        DetokState.from_json({"v": 1, "prev_tokens": tokens, "prefix_offset": 0, "read_offset": 0})
