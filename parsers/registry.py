"""Parsers by vLLM name: `--reasoning-parser` / `--tool-call-parser` values map 1:1.

The name -> "module:Class" tables live next to the families (`parsers.reasoning` and
`parsers.tools` packages); a module is imported on first use only, so a broken family fails
when it is asked for and never affects the others. Adding a family is one new module plus one
line in its package's table.
"""

from __future__ import annotations

import importlib

from parsers._base import ReasoningParser, ToolParser
from parsers._errors import ParserConfigError, UnknownParserError
from parsers.reasoning import REASONING_PARSER_MODULES
from parsers.tools import TOOL_PARSER_MODULES

__all__ = [
    "get_reasoning_parser",
    "get_tool_parser",
    "reasoning_parser_names",
    "tool_parser_names",
]


def reasoning_parser_names() -> list[str]:
    return sorted(REASONING_PARSER_MODULES)


def tool_parser_names() -> list[str]:
    return sorted(TOOL_PARSER_MODULES)


def get_reasoning_parser(name: str) -> type[ReasoningParser]:
    """The class registered under vLLM reasoning-parser `name`."""
    return _load(name, REASONING_PARSER_MODULES, ReasoningParser, "reasoning")


def get_tool_parser(name: str) -> type[ToolParser]:
    """The class registered under vLLM tool-call-parser `name`."""
    return _load(name, TOOL_PARSER_MODULES, ToolParser, "tool")


def _load(name: str, table: dict[str, str], base: type, kind: str) -> type:
    target = table.get(name)
    if target is None:
        raise UnknownParserError(
            f"unknown {kind} parser {name!r}; valid names: {', '.join(sorted(table))}"
        )
    module_name, _, class_name = target.partition(":")
    module = importlib.import_module(module_name)  # import errors propagate: a real bug
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ParserConfigError(f"{target} is not a {base.__name__} subclass")
    return cls
