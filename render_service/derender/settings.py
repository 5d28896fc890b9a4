"""The compact request settings derender reads, extracted once from chat/completion requests.

A streaming state carries these (a few hundred bytes plus the tools the parser needs) so that
after the first chunk the client may stop sending `chat_request`. They are exactly the fields
vLLM 0.33 derender reads from the request, with vLLM's defaults when there is no request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from parsers.tools._schema import decode_tools, encode_tools
from render_service.derender.logprobs import chat_top_limit, completion_top_limit
from render_service.derender.stops import StopRules

__all__ = ["ChatSettings", "CompletionSettings", "compact_tools", "tools_for_parser"]


def _stop_list(stop: Any) -> tuple[str, ...]:
    """The request's `stop` as SamplingParams normalises it (empty strings dropped)."""
    if not stop:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(s for s in stop if s)


def _dump(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True)
    return value


def compact_tools(tools: Any, view: str = "types") -> Any:
    """Tools as far as the configured tool parser reads them (`parsers.tools._schema`): their
    presence, their names, or their names and parameter type skeletons; never descriptions,
    so a stream state stays small. `tools_for_parser` turns this back into tool objects."""
    if tools is None:
        return None
    return encode_tools([_dump(tool) for tool in tools], view)


def tools_for_parser(compact: Any) -> list[dict[str, Any]] | None:
    """The tool objects a parser is built with, from `compact_tools`'s form."""
    return None if compact is None else decode_tools(compact)


@dataclass(frozen=True, slots=True)
class _Common:
    has_request: bool = False
    return_token_ids: bool = False
    top_limit: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool | None = None
    spaces_between_special_tokens: bool = True

    @property
    def stop_rules(self) -> StopRules | None:
        if not self.has_request:
            return None
        return StopRules(
            self.stop,
            self.stop_token_ids,
            self.include_stop_str_in_output,
            self.ignore_eos,
            self.min_tokens,
        )

    def skip_special(self, preserve_special: bool) -> bool:
        """vLLM's `_decode_params`: a parser needs special tokens; else the request decides."""
        if preserve_special:
            return False
        return not self.has_request or self.skip_special_tokens is not False

    def to_json(self) -> dict[str, Any]:
        # Shallow: the state's encoder copies containers as it dumps them (asdict would
        # deep-copy the tools on every chunk).
        return {name: getattr(self, name) for name in _field_names(type(self))}


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def _field_names(cls: type[Any]) -> tuple[str, ...]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def _common_fields(req: Any) -> dict[str, Any]:
    return {
        "has_request": True,
        "return_token_ids": bool(getattr(req, "return_token_ids", False)),
        "stop": _stop_list(getattr(req, "stop", None)),
        "stop_token_ids": tuple(getattr(req, "stop_token_ids", None) or ()),
        "include_stop_str_in_output": bool(getattr(req, "include_stop_str_in_output", False)),
        "ignore_eos": bool(getattr(req, "ignore_eos", False)),
        "min_tokens": int(getattr(req, "min_tokens", 0) or 0),
        "skip_special_tokens": getattr(req, "skip_special_tokens", None),
        "spaces_between_special_tokens": bool(
            getattr(req, "spaces_between_special_tokens", True)
        ),
    }


@dataclass(frozen=True, slots=True)
class ChatSettings(_Common):
    tools: Any = None  # `compact_tools`'s form
    tool_choice: Any = "none"
    parallel_tool_calls: bool | None = True
    include_reasoning: bool = True
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_request(
        cls, req: Any, resolve_kwargs: Callable[[Any], dict[str, Any]], tool_view: str = "types"
    ) -> ChatSettings:
        return cls(
            **_common_fields(req),
            top_limit=chat_top_limit(
                getattr(req, "logprobs", False),
                getattr(req, "top_logprobs", 0),
                bool(getattr(req, "logprob_token_ids", None)),
            ),
            tools=compact_tools(getattr(req, "tools", None), tool_view),
            tool_choice=_dump(getattr(req, "tool_choice", "none")),
            parallel_tool_calls=getattr(req, "parallel_tool_calls", True),
            include_reasoning=bool(getattr(req, "include_reasoning", True)),
            chat_template_kwargs=dict(resolve_kwargs(req)),
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChatSettings:
        """Rebuild from a (signed) state; types are checked because a replica of another
        version may have signed it. Raises TypeError on a field of the wrong type."""
        _check_chat_types(data)
        return cls(**_tuples(data))

    @property
    def forced_named_tool(self) -> bool:
        return isinstance(self.tool_choice, dict)

    @property
    def forces_tool_calls(self) -> bool:
        return self.forced_named_tool or self.tool_choice == "required"


@dataclass(frozen=True, slots=True)
class CompletionSettings(_Common):
    @classmethod
    def from_request(cls, req: Any) -> CompletionSettings:
        return cls(
            **_common_fields(req),
            top_limit=completion_top_limit(
                getattr(req, "logprobs", None), bool(getattr(req, "logprob_token_ids", None))
            ),
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CompletionSettings:
        return cls(**_tuples(data))


def _check_chat_types(data: dict[str, Any]) -> None:
    tools = data.get("tools")
    if tools is not None:
        try:
            decode_tools(tools)
        except ValueError as exc:
            raise TypeError("settings.tools is not an encoded tool list") from exc
    if not isinstance(data.get("tool_choice", "none"), str | dict | None):
        raise TypeError("settings.tool_choice must be a string or an object")
    if not isinstance(data.get("chat_template_kwargs", {}), dict):
        raise TypeError("settings.chat_template_kwargs must be an object")
    for name in ("parallel_tool_calls", "include_reasoning"):
        if not isinstance(data.get(name, True), bool | None):
            raise TypeError(f"settings.{name} must be a boolean")


def _tuples(data: dict[str, Any]) -> dict[str, Any]:
    out = dict(data)
    for key in ("stop", "stop_token_ids"):
        out[key] = tuple(out.get(key) or ())
    return out
