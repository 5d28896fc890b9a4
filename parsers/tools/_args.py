"""Argument formats: how a family turns a call's raw argument text into the arguments string.

A format is a small sans-IO transducer over the raw text of one call's arguments (markers
included where the family's grammar passes them on as argument text):

    state = fmt.start(name)                      # the call was committed under `name`
    state, out, rest = fmt.feed(state, text)     # `out`: argument fragment(s) to send now
    state, out = fmt.end(state)                  # the call ended (a marker, or the output)

`rest` is None while the arguments go on; a format whose arguments end by themselves (a JSON
value that closes) returns the text after their end. The concatenated `out` of any split of
the same raw text is the same string, and equals what the family's batch rule computes from
the whole raw text (each format documents the cases where that cannot hold, because a
fragment already sent would have to change).

Formats hold back only what exactness needs (an escape, a value the schema may coerce, a
possible closing tag) and expose `held_chars()` on their state, which the machine counts
against the tool-call limit. Schemas come from the parser (compiled once), never from the
state.
"""

from __future__ import annotations

import json
from typing import Protocol, TypeVar

from parsers._state import JsonState

__all__ = ["ArgFormat", "json_string_body"]

StateT = TypeVar("StateT", bound=JsonState)


class ArgFormat(Protocol[StateT]):
    """Generic in the format's own state class (callers that mix formats use ArgFormat[Any])."""

    def start(self, name: str) -> StateT: ...

    def feed(self, state: StateT, text: str) -> tuple[StateT, str, str | None]: ...

    def end(self, state: StateT) -> tuple[StateT, str]: ...


def json_string_body(text: str) -> str:
    """`text` as it appears inside a JSON string written by `json.dumps(ensure_ascii=False)`.

    json escapes character by character, so escaping the pieces of a string one at a time
    concatenates to the escaped whole."""
    return json.dumps(text, ensure_ascii=False)[1:-1]
