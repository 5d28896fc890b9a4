"""Size checks on caller-supplied engine output, run before any decoding (vLLM's 400s)."""

from __future__ import annotations

from collections.abc import Sequence

from render_service.derender.schemas import (
    ChoiceIn,
    GenerateChunkIn,
    GenerateResponseIn,
    StreamChoiceIn,
)
from render_service.errors import BadRequestError

__all__ = [
    "MAX_N_SEQUENCES",
    "check_responses",
    "check_prompt_ids",
    "check_empty_choices",
    "check_chunk",
]

# vLLM's VLLM_MAX_N_SEQUENCES default.
MAX_N_SEQUENCES = 16384


def _check_choice(choice: ChoiceIn | StreamChoiceIn, max_model_len: int, max_logprobs: int) -> None:
    if choice.token_ids and len(choice.token_ids) > max_model_len:
        raise BadRequestError(
            f"token_ids length ({len(choice.token_ids)}) in choice {choice.index} exceeds "
            f"max_model_len ({max_model_len})."
        )
    content = choice.logprobs.content if choice.logprobs else None
    if not content:
        return
    if len(content) > max_model_len:
        raise BadRequestError(
            f"logprobs.content length ({len(content)}) in choice {choice.index} exceeds "
            f"max_model_len ({max_model_len})."
        )
    for entry in content:
        if max_logprobs >= 0 and len(entry.top_logprobs) > max_logprobs:
            raise BadRequestError(
                f"top_logprobs count ({len(entry.top_logprobs)}) in choice {choice.index} "
                f"exceeds max_logprobs ({max_logprobs})."
            )


def check_responses(
    responses: Sequence[GenerateResponseIn], max_model_len: int, max_logprobs: int
) -> None:
    if len(responses) > MAX_N_SEQUENCES:
        raise BadRequestError(
            f"generate_responses count ({len(responses)}) exceeds server maximum "
            f"({MAX_N_SEQUENCES}). Set VLLM_MAX_N_SEQUENCES to increase this limit."
        )
    for gen in responses:
        if len(gen.choices) > MAX_N_SEQUENCES:
            raise BadRequestError(
                f"choices count ({len(gen.choices)}) in response '{gen.request_id}' exceeds "
                f"server maximum ({MAX_N_SEQUENCES})."
            )
        for choice in gen.choices:
            _check_choice(choice, max_model_len, max_logprobs)
        if gen.prompt_logprobs and len(gen.prompt_logprobs) > max_model_len:
            raise BadRequestError(
                f"prompt_logprobs length ({len(gen.prompt_logprobs)}) in response "
                f"'{gen.request_id}' exceeds max_model_len ({max_model_len})."
            )


def check_prompt_ids(prompt_ids: Sequence[Sequence[int] | None], max_model_len: int) -> None:
    for ids in prompt_ids:
        if ids is not None and len(ids) > max_model_len:
            raise BadRequestError(
                f"prompt_token_ids length ({len(ids)}) exceeds max_model_len ({max_model_len})."
            )


def check_empty_choices(responses: Sequence[GenerateResponseIn], with_request_id: bool) -> None:
    for gen in responses:
        for choice in gen.choices:
            if not choice.token_ids:
                where = f" in response {gen.request_id}" if with_request_id else ""
                raise BadRequestError(f"choice {choice.index}{where} has empty or null token_ids")


def check_chunk(
    chunk: GenerateChunkIn,
    kind: str,
    prompt_len: int,
    prior_len: int,
    max_model_len: int,
    max_logprobs: int,
) -> None:
    if len(chunk.choices) > 1:
        raise BadRequestError(
            f"derender_{kind}_stream expects at most one choice per chunk "
            f"(got {len(chunk.choices)})."
        )
    for choice in chunk.choices:
        _check_choice(choice, max_model_len, max_logprobs)
    delta = sum(len(c.token_ids or ()) for c in chunk.choices)
    if prompt_len + prior_len + delta > max_model_len:
        raise BadRequestError(
            f"prompt_token_ids length ({prompt_len}) plus output_token_ids length ({prior_len}) "
            f"plus delta ({delta}) exceeds max_model_len ({max_model_len})."
        )
