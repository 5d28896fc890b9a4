"""`parsers` errors raised while derendering engine output -> typed 400s (never a 500).

The engine output, the request and the echoed state all come from the client, so anything
`parsers/` rejects is the client's input:

  LimitExceededError  a bounded buffer would overflow (a stream's detokenizer window, held
                      whitespace, an in-flight tool call)     -> 400 BadRequestError
  StateError          the parser/detokenizer part of a stream_state does not decode
                                                              -> 400 StreamStateError
  any other ParserError (unparseable input, a parser that cannot be built for the request)
                                                              -> 400 BadRequestError

`param` names the body field the engine output came in (generate_response, generate_chunk,
generate_responses), as upstream names the offending field in its 400s.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from parsers._errors import LimitExceededError, ParserError, StateError
from render_service.errors import BadRequestError, StreamStateError

__all__ = ["engine_output_errors"]


@contextmanager
def engine_output_errors(param: str) -> Iterator[None]:
    try:
        yield
    except LimitExceededError as exc:
        raise BadRequestError(
            f"engine output exceeds a derender limit: {exc}", param=param
        ) from exc
    except StateError as exc:
        raise StreamStateError(f"invalid stream_state: {exc}") from exc
    except ParserError as exc:
        raise BadRequestError(f"cannot derender the engine output: {exc}", param=param) from exc
