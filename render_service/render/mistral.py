"""Chat render under `--tokenizer-mode mistral`: mistral-common tokenizes the chat, as vLLM 0.33.

vLLM's MistralRenderer does not use a Jinja template: transformers' `MistralCommonBackend`
(mistral-common in `ValidationMode.test`) turns the OpenAI messages and tools into token ids
(`[INST]`, `[AVAILABLE_TOOLS]`, `[TOOL_CALLS]`, `[TOOL_RESULTS]`, ... by tokenizer version).
Before that, vLLM's serving layer (`vllm/tokenizers/mistral.py`):

* gives every assistant message a `tool_calls` list (empty when it has none);
* keeps the last 9 characters of tool-call ids and `tool_call_id`s (Mistral's id length);
* refuses `chat_template` / `chat_template_kwargs` and reasoning efforts mistral-common has
  no value for (render only, not /tokenize);
* refuses `add_generation_prompt` after a final assistant message and
  `continue_final_message` after any other.

Every mistral-common failure (its asserts and exceptions) is a 400, as vLLM's
`safe_apply_chat_template` turns them into ValueError.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

from render_service.errors import BadRequestError
from render_service.model import ModelBundle
from render_service.protocol import vllm_validation_error
from render_service.protocol.validation import sanitize_message
from render_service.render.chat_prompt import reused_prompt_ids
from render_service.render.prompt_limits import TokenizeLimits

__all__ = ["check_mistral_request", "mistral_prompt_ids", "mistral_grammar_factory"]

_ID_LEN = 9  # vLLM's truncate_tool_call_ids


def check_mistral_request(request: Any) -> None:
    """vLLM's `validate_request_params` (chat render only)."""
    from mistral_common.protocol.instruct.request import ReasoningEffort

    if request.chat_template is not None or request.chat_template_kwargs is not None:
        raise vllm_validation_error(
            "chat_template is not supported for Mistral tokenizers.", parameter="chat_template"
        )
    efforts = [effort.value for effort in ReasoningEffort]
    if request.reasoning_effort and request.reasoning_effort not in efforts:
        raise vllm_validation_error(
            f"reasoning_effort={request.reasoning_effort} is not supported by Mistral models. "
            f"Supported values are: {efforts}.",
            parameter="reasoning_effort",
        )


def mistral_prompt_ids(
    bundle: ModelBundle,
    request: Any,
    tool_dicts: list[dict[str, Any]] | None,
    limits: TokenizeLimits | None = None,
) -> list[int]:
    """The prompt ids vLLM's MistralRenderer renders for a chat (or chat /tokenize) request;
    with `limits` (chat render), vLLM's post-tokenization truncation and length bound (the ids
    were not tokenized with max_length: their exact count is reported)."""
    reuse = reused_prompt_ids(request, bundle, request.messages)
    if reuse is not None:
        return reuse
    messages = _prepared_messages(request.messages)
    _check_generation_args(messages, request.add_generation_prompt, request.continue_final_message)
    kwargs: dict[str, Any] = {}
    if _version(bundle) >= 15:  # vLLM passes the effort only to v15+ tokenizers
        kwargs["reasoning_effort"] = request.reasoning_effort
    try:
        ids = bundle.mistral.apply_chat_template(
            conversation=messages,
            tools=tool_dicts,
            continue_final_message=request.continue_final_message,
            tokenize=True,
            padding=False,
            truncation=False,
            max_length=None,
            return_tensors=None,
            return_dict=False,
            **kwargs,
        )
    # mistral-common rejects input with asserts and its own exceptions; vLLM answers any of
    # them (and any other failure inside it) with a 400 carrying the message.
    except Exception as exc:
        raise BadRequestError(sanitize_message(str(exc))) from exc
    ids = [int(token) for token in ids]
    return ids if limits is None else limits.check_tokens(ids, counted_whole=True)


def mistral_grammar_factory(bundle: ModelBundle) -> Callable[[], Any] | None:
    """vLLM's MistralTokenizer.grammar_factory, built on first use (llguidance reads the whole
    vocabulary); None unless `supports_grammar`: a Tekken tokenizer of v11 or later."""
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    if not (bundle.is_mistral and isinstance(_raw(bundle), Tekkenizer) and _version(bundle) >= 11):
        return None

    @functools.cache
    def build() -> Any:
        from mistral_common.guidance.grammar_factory import GrammarFactory

        return GrammarFactory(bundle.mistral.tokenizer)

    return build


def _version(bundle: ModelBundle) -> int:
    tokenizer = bundle.mistral.tokenizer.instruct_tokenizer.tokenizer
    return int(str(tokenizer.version.value).split("v")[-1])


def _prepared_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's maybe_serialize_tool_calls + truncate_tool_call_ids, on a copy."""
    prepared = copy.deepcopy(messages)
    for message in prepared:
        role = message.get("role")
        if role == "assistant":
            calls = message.get("tool_calls")
            message["tool_calls"] = list(calls) if calls is not None else []
            for call in message["tool_calls"]:
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    call["id"] = call["id"][-_ID_LEN:]
        elif role in ("tool", "tool_results") and isinstance(message.get("tool_call_id"), str):
            message["tool_call_id"] = message["tool_call_id"][-_ID_LEN:]
    return prepared


def _check_generation_args(messages: list[dict[str, Any]], add_generation_prompt: bool, continue_final: bool) -> None:
    """vLLM's `_validate_apply_chat_template_args` (ValueError -> 400)."""
    if add_generation_prompt and continue_final:
        raise BadRequestError("Cannot set both `add_generation_prompt` and `continue_final_message` to True.")
    if not messages:
        raise BadRequestError("list index out of range")
    last_role = messages[-1].get("role")
    if add_generation_prompt and last_role == "assistant":
        raise BadRequestError(
            "Cannot set `add_generation_prompt` to True when the last message is from the "
            "assistant. Consider using `continue_final_message` instead."
        )
    if continue_final and last_role != "assistant":
        raise BadRequestError(
            "Cannot set `continue_final_message` to True when the last message is not from the assistant."
        )


def _raw(bundle: ModelBundle) -> Any:
    """mistral-common's own tokenizer (SentencePiece or Tekken) under the backend."""
    return bundle.mistral.tokenizer.instruct_tokenizer.tokenizer


def mistral_encode(
    bundle: ModelBundle, text: str, *, add_special_tokens: bool, max_length: int | None = None
) -> list[int]:
    """vLLM's MistralTokenizer encoding: control-token text stays text; BOS when special. With
    `max_length` (vLLM's renderer then calls the transformers backend with truncation) the
    text's ids are cut from the left so that they and the BOS fit."""
    if max_length:
        encoded = bundle.mistral(text, add_special_tokens=add_special_tokens, truncation=True, max_length=max_length)
        return [int(token) for token in encoded["input_ids"]]
    return [int(token) for token in _raw(bundle).encode(text, bos=add_special_tokens, eos=False)]


def mistral_token_strs(bundle: ModelBundle, ids: list[int]) -> list[str]:
    """vLLM's convert_ids_to_tokens(skip_special_tokens=False): one piece per id."""
    return [_raw(bundle).id_to_piece(token) for token in ids]


def mistral_decode(bundle: ModelBundle, ids: list[int]) -> str:
    """vLLM's MistralTokenizer.decode (specials kept). An id outside the vocabulary is a 400
    here; vLLM answers it with SentencePiece's OUT_OF_RANGE as a 500."""
    vocab_size = _raw(bundle).n_words
    if any(not 0 <= token < vocab_size for token in ids):
        raise BadRequestError(f"token id out of range: the vocabulary has {vocab_size} ids")
    return str(bundle.mistral.decode(ids, skip_special_tokens=False))
