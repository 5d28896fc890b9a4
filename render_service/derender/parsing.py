"""The chat parser as derender uses it: built from the server flags plus a request's settings.

Parser objects are immutable configuration, so they are cached (LRU) by the settings they
depend on; a stream's chunks then reuse one parser instead of rebuilding it per chunk.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Sequence
from threading import Lock
from typing import TYPE_CHECKING, Any

import orjson

from parsers.tools import tool_parser_traits
from render_service.config import ServiceConfig
from render_service.derender.settings import ChatSettings, tools_for_parser

if TYPE_CHECKING:
    from parsers.chat import ChatParser

__all__ = ["ParserFactory"]

# Distinct (tools, tool_choice, kwargs...) combinations kept alive; a parser is a few KB.
_CACHE_SIZE = 256


class ParserFactory:
    def __init__(
        self,
        config: ServiceConfig,
        tokenizer: Any,
        special_tokens: Sequence[str],
        response_template: dict[str, Any] | None = None,
    ):
        self.reasoning_name = config.reasoning_parser
        self.tool_name = config.tool_call_parser
        self.enable_auto_tools = config.enable_auto_tool_choice
        self.max_tool_call_chars = config.limits.max_tool_call_chars
        self._tokenizer = tokenizer
        self._special_tokens = tuple(special_tokens)
        # The checkpoint's response_template metadata, for the parsers that read it (hf, beam).
        self._template = {"response_template": response_template} if response_template else {}
        self._cache: OrderedDict[bytes, ChatParser] = OrderedDict()
        self._lock = Lock()

    @property
    def configured(self) -> bool:
        return bool(self.reasoning_name or self.tool_name)

    @property
    def has_tool_parser(self) -> bool:
        return bool(self.tool_name)

    def get(self, settings: ChatSettings) -> ChatParser:
        key = orjson.dumps(
            [
                settings.tools,
                settings.tool_choice,
                settings.parallel_tool_calls,
                settings.include_reasoning,
                settings.chat_template_kwargs,
            ],
            option=orjson.OPT_SORT_KEYS,
        )
        with self._lock:
            parser = self._cache.get(key)
            if parser is not None:
                self._cache.move_to_end(key)
                return parser
        parser = self._build(settings)
        with self._lock:
            self._cache[key] = parser
            if len(self._cache) > _CACHE_SIZE:
                self._cache.popitem(last=False)
        return parser

    def _build(self, settings: ChatSettings) -> ChatParser:
        # Imported on first use: a server without parsers never loads them.
        from parsers.chat import ChatOptions, ChatParser
        from parsers.registry import get_reasoning_parser, get_tool_parser

        reasoning = None
        if self.reasoning_name:
            reasoning_cls = get_reasoning_parser(self.reasoning_name)
            reasoning = reasoning_cls(
                self._tokenizer,
                settings.chat_template_kwargs,
                special_tokens=self._special_tokens,
                **self._template_for(reasoning_cls),
                **_tool_request_for(reasoning_cls, settings),
            )
        tool = None
        if self.tool_name:
            tool_cls = get_tool_parser(self.tool_name)
            tool = tool_cls(
                self._tokenizer,
                tools_for_parser(settings.tools),
                max_call_chars=self.max_tool_call_chars,
                **self._tool_options(tool_cls, settings),
                **self._template_for(tool_cls),
            )
        options = ChatOptions(
            tool_choice=settings.tool_choice,
            parallel_tool_calls=settings.parallel_tool_calls,
            include_reasoning=settings.include_reasoning,
            enable_auto_tools=self.enable_auto_tools,
        )
        return ChatParser(reasoning, tool, options)

    def _template_for(self, cls: type) -> dict[str, Any]:
        return self._template if getattr(cls, "takes_response_template", False) else {}

    def _tool_options(self, tool_cls: type, settings: ChatSettings) -> dict[str, Any]:
        """What vLLM 0.33 sets on its engine-based tool parsers besides the tools.

        Its parser engine drops the tokenizer's special tokens from text. With no reasoning
        parser configured, `Parser.__init__` sets the tool parser's `skip_reasoning_parsing`:
        reasoning markup (`[THINK]...[/THINK]`, a stray `</think>`) is then plain content.
        Engine tool parsers get the request's chat-template kwargs as the reasoning parser
        does (GLM's thinking switch changes its grammar).
        """
        if not tool_parser_traits(self.tool_name or "").engine_based:
            return {}
        accepted = inspect.signature(tool_cls).parameters
        options = {"special_tokens": self._special_tokens, "skip_reasoning_parsing": not self.reasoning_name,
                   "chat_template_kwargs": settings.chat_template_kwargs}  # fmt: skip
        return {k: v for k, v in options.items() if k in accepted}


def _tool_request_for(cls: type, settings: ChatSettings) -> dict[str, Any]:
    """The request's tools (present or not) and tool_choice, for a reasoning parser whose vLLM
    class reads them off the request (kimi_k3 keeps the tools channel raw for the tool parser)."""
    if not getattr(cls, "takes_tool_request", False):
        return {}
    return {"request_tools": bool(tools_for_parser(settings.tools)), "tool_choice": settings.tool_choice}
