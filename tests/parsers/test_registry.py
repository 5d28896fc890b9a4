"""Registry by vLLM names, and the sans-IO import rule of parsers/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from parsers import UnknownParserError
from parsers._base import ReasoningParser
from parsers.reasoning import REASONING_PARSER_MODULES
from parsers.registry import (
    get_reasoning_parser,
    get_tool_parser,
    reasoning_parser_names,
    tool_parser_names,
)
from parsers.tools import TOOL_PARSER_MODULES

from .family_tokenizers import REGISTERED_REASONING_PARSERS, REGISTERED_TOOL_PARSERS

PARSERS_DIR = Path(__file__).resolve().parents[2] / "parsers"


# vLLM 0.33 names not implemented yet, one per line: a family that lands removes its names.
# The registry must equal vLLM's pinned registry minus exactly these.
PENDING_TOOL_PARSERS: frozenset[str] = frozenset({
})
PENDING_REASONING_PARSERS: frozenset[str] = frozenset()


def test_reasoning_names_are_vllms() -> None:
    assert reasoning_parser_names() == sorted(set(REGISTERED_REASONING_PARSERS) - PENDING_REASONING_PARSERS)
    for name in reasoning_parser_names():
        cls = get_reasoning_parser(name)
        assert issubclass(cls, ReasoningParser) and cls.name == name


def test_tool_names_are_vllms_and_map_to_agreed_modules() -> None:
    assert tool_parser_names() == sorted(set(REGISTERED_TOOL_PARSERS) - PENDING_TOOL_PARSERS)
    assert TOOL_PARSER_MODULES["qwen3_json"] == TOOL_PARSER_MODULES["hermes"]
    assert get_tool_parser("hermes") is get_tool_parser("qwen3_json")


@pytest.mark.parametrize("getter,names", [(get_reasoning_parser, REASONING_PARSER_MODULES),
                                           (get_tool_parser, TOOL_PARSER_MODULES)])
def test_unknown_name_is_a_typed_error_listing_valid_names(getter, names) -> None:
    with pytest.raises(UnknownParserError) as info:
        getter("no_such_parser")
    for name in names:
        assert name in str(info.value)
    with pytest.raises(KeyError):  # also a KeyError, like vLLM's managers
        getter("no_such_parser")


FORBIDDEN = {"fastapi", "starlette", "httpx", "uvicorn", "asyncio", "render_service"}


def test_parsers_import_nothing_from_the_web_layer() -> None:
    offenders = []
    for path in PARSERS_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            else:
                continue
            for module in modules:
                if module.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{path.relative_to(PARSERS_DIR)}: {module}")
    assert PARSERS_DIR.joinpath("chat.py").exists()
    assert offenders == []
