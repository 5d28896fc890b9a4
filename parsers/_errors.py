"""Typed parser errors. Parsers raise these and nothing else on bad input or bad state."""

from __future__ import annotations

__all__ = [
    "ParserError",
    "ParseError",
    "StateError",
    "LimitExceededError",
    "ParserConfigError",
    "UnknownParserError",
]


class ParserError(Exception):
    """Base of every error `parsers/` raises on purpose."""


class ParseError(ParserError):
    """The input cannot be parsed (e.g. garbage deltas where the format forbids them)."""


class StateError(ParserError):
    """A serialised state is corrupt, of another version, or of another parser."""


class LimitExceededError(ParserError):
    """A bounded buffer (named limit) would overflow."""


class ParserConfigError(ParserError):
    """A parser cannot be built for this tokenizer (e.g. its marker tokens are missing)."""


class UnknownParserError(ParserConfigError, KeyError):
    """No parser is registered under the requested vLLM name; the message lists valid names."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""
