"""Request options that `vllm serve` applies around generation, and the gateway therefore must.

Render and derender reproduce vLLM's `/render` and `/derender`, which leave these to the
serving layer; vLLM 0.33's `OpenAIServingChat` / `OpenAIServingCompletion` do this:

- `stream_options.include_usage` / `.continuous_usage_stats` (`should_include_usage`):
  continuous stats only count when include_usage is on too; every streamed chunk then carries
  the running usage of its choice.
- chat `echo`: the last message's content is prepended to each choice's content (batch) or
  sent as one extra delta per choice after the role chunks (streaming), but only when that
  message's role is the response role (`get_chat_request_role`: "assistant" unless
  `add_generation_prompt` is false, then the last message's own role).
- completions `echo`: the prompt text (the request's string, or the decoded prompt ids; ""
  with `return_token_ids`) is prepended to each choice's text; streaming puts it, and the
  prompt ids, on each choice's first chunk. With `max_tokens: 0` only the prompt is returned.

Not reproduced, refused with a 400 instead: completions `echo` together with `logprobs`.
vLLM answers it with the prompt's logprobs; a tokens-only engine streams no prompt logprobs,
and formatting them as completion logprobs is derender work we do not have.
Where vLLM itself fails (chat echo of a last message whose content is a list of parts: its
stream raises a validation error), the gateway joins the text parts with "\\n", as vLLM's
batch response does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from render_service.errors import BadRequestError

__all__ = ["ServeOptions", "completion_prompts"]

_RESPONSE_ROLE = "assistant"  # vLLM's --response-role default


@dataclass(frozen=True, slots=True)
class ServeOptions:
    endpoint: str  # "chat" | "completion"
    include_usage: bool = False
    continuous_usage: bool = False
    echo: bool = False
    return_token_ids: bool = False
    logprobs: bool = False
    echo_only: bool = False  # completions: echo with max_tokens 0 returns only the prompt
    response_role: str = _RESPONSE_ROLE
    chat_echo: str = ""  # chat: what echo prepends ("" when nothing)

    @classmethod
    def of(cls, endpoint: str, body: dict[str, Any]) -> ServeOptions:
        stream_options = body.get("stream_options") or {}
        include_usage = bool(body.get("stream")) and bool(stream_options.get("include_usage"))
        echo = bool(body.get("echo"))
        role = _response_role(body) if endpoint == "chat" else _RESPONSE_ROLE
        return cls(
            endpoint=endpoint,
            include_usage=include_usage,
            continuous_usage=include_usage and bool(stream_options.get("continuous_usage_stats")),
            echo=echo,
            return_token_ids=bool(body.get("return_token_ids")),
            logprobs=_wants_logprobs(endpoint, body),
            echo_only=echo and endpoint == "completion" and body.get("max_tokens") == 0,
            response_role=role,
            chat_echo=_chat_echo(body, role) if echo and endpoint == "chat" else "",
        )

    def check(self) -> None:
        """Refuse what the gateway cannot answer the way vLLM does (see the module docstring)."""
        if self.endpoint == "completion" and self.echo and self.logprobs:
            raise BadRequestError(
                "`echo` together with `logprobs` is not supported by the render-service gateway "
                "(it would need the prompt's logprobs, which tokens-only engines do not stream); "
                "send the request without `echo`.", param="echo")


def completion_prompts(body: dict[str, Any]) -> list[str | list[int]]:
    """The prompts of a completion body in render's order: text, or token ids."""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        return [prompt]
    return list(prompt) if isinstance(prompt, list) else []


def _wants_logprobs(endpoint: str, body: dict[str, Any]) -> bool:
    if endpoint == "completion":
        return body.get("logprobs") is not None
    return bool(body.get("logprobs"))


def _response_role(body: dict[str, Any]) -> str:
    if body.get("add_generation_prompt", True):
        return _RESPONSE_ROLE
    messages = body.get("messages") or [{}]
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    return str(last.get("role", _RESPONSE_ROLE))


def _chat_echo(body: dict[str, Any], role: str) -> str:
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    if last.get("role") != role:
        return ""
    return _text_of(last.get("content"))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(str(part["text"]) for part in content
                         if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""
