"""Every `parsers` error raised on engine output becomes a typed 400 (never a 500)."""

from __future__ import annotations

import pytest

from parsers._errors import (
    LimitExceededError,
    ParseError,
    ParserConfigError,
    ParserError,
    StateError,
)
from render_service.derender.parser_errors import engine_output_errors
from render_service.errors import BadRequestError, StreamStateError


@pytest.mark.parametrize("error,expected,state_error", [
    (LimitExceededError("window"), "exceeds a derender limit: window", False),
    (StateError("bad phase"), "invalid stream_state: bad phase", True),
    (ParseError("garbage"), "cannot derender the engine output: garbage", False),
    (ParserConfigError("no markers"), "cannot derender the engine output: no markers", False),
    (ParserError("other"), "cannot derender the engine output: other", False),
])
def test_parser_errors_map_to_typed_400s(error, expected, state_error) -> None:  # noqa: ANN001
    with pytest.raises(BadRequestError) as caught:
        with engine_output_errors("generate_chunk"):
            raise error
    assert caught.value.status == 400 and expected in caught.value.message
    assert isinstance(caught.value, StreamStateError) == state_error
    assert caught.value.param == (None if state_error else "generate_chunk")
    assert caught.value.__cause__ is error


def test_other_exceptions_are_not_swallowed() -> None:
    with pytest.raises(KeyError):
        with engine_output_errors("generate_response"):
            raise KeyError("a bug stays a bug")
