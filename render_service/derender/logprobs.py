"""Engine logprobs (token ids) -> OpenAI logprobs (token strings), as vLLM 0.33 derender does.

Two input forms are accepted (`normalize_logprobs`):
  * the integer `GenerateLogProbs` of vLLM 0.33: `{"token_id": N, "logprob": x,
    "top_logprobs": [{"token_id": M, ...}]}`;
  * the older `ChatCompletionLogProbs` form of earlier generate servers, where the id hides in
    a placeholder string: `{"token": "token_id:N", "logprob": x, "bytes": ..., ...}`.

Both become `Position` values; conversion decodes each id on its own, repairs a trailing
U+FFFD (a byte-fallback piece of a multi-byte character) with up to `CONTEXT_WINDOW` preceding
sampled ids, and cuts `top_logprobs` to the endpoint's limit before decoding. Streaming callers
pass the previous chunk's last sampled ids (`context_tail`) so repair works across chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from render_service.errors import BadRequestError

__all__ = [
    "CONTEXT_WINDOW",
    "Candidate",
    "Position",
    "TokenDecoder",
    "normalize_logprobs",
    "chat_logprobs",
    "completion_logprobs",
    "context_tail",
    "chat_top_limit",
    "completion_top_limit",
]

# vLLM's `_correct_decoded_token` looks back at most 4 sampled ids.
CONTEXT_WINDOW = 4
_REPLACEMENT = "\ufffd"
_PLACEHOLDER = "token_id:"


class TokenDecoder(Protocol):
    """What conversion needs from the tokenizer (the HF tokenizer satisfies it via an adapter)."""

    def decode_ids(self, ids: Sequence[int]) -> str: ...

    def token_string(self, token_id: int) -> str | None:
        """The id decoded alone (leading space restored); None when the id has no vocab entry."""


@dataclass(frozen=True, slots=True)
class Candidate:
    token_id: int
    logprob: float


@dataclass(frozen=True, slots=True)
class Position:
    sampled: Candidate
    top: tuple[Candidate, ...]


def _placeholder_id(token: object, where: str) -> int:
    if isinstance(token, str) and token.startswith(_PLACEHOLDER):
        digits = token[len(_PLACEHOLDER) :]
        if digits.isdigit():
            return int(digits)
    raise BadRequestError(
        f"{where}: logprobs entries need an integer 'token_id' (or the older "
        f"'token': 'token_id:N' placeholder form); got token {str(token)[:40]!r}"
    )


def _candidate(raw: Any, where: str) -> Candidate:
    token_id = raw.token_id
    if token_id is None:
        token_id = _placeholder_id(raw.token, where)
    return Candidate(token_id, raw.logprob)


def normalize_logprobs(content: Sequence[Any] | None, where: str) -> list[Position] | None:
    """Both wire forms (entries already shape-checked by the request schema) as `Position`s."""
    if content is None:
        return None
    return [
        Position(
            _candidate(entry, where),
            tuple(_candidate(top, where) for top in entry.top_logprobs),
        )
        for entry in content
    ]


def chat_top_limit(logprobs: bool | None, top_logprobs: int | None, return_all: bool) -> int | None:
    """How many candidates `/v1/chat/completions` keeps (None: all); vLLM's rule."""
    if not logprobs:
        return None
    if return_all or top_logprobs == -1:
        return None
    return top_logprobs or 0


def completion_top_limit(logprobs: int | None, return_all: bool) -> int | None:
    """How many candidates `/v1/completions` keeps: `logprobs + 1` (None: all)."""
    if return_all or logprobs is None or logprobs == -1:
        return None
    return max(logprobs + 1, 0)


def context_tail(previous: Sequence[int], delta: Sequence[int]) -> list[int]:
    return [*previous, *delta][-CONTEXT_WINDOW:]


def _repair(token_id: int, context: Sequence[int], decoder: TokenDecoder) -> str:
    """vLLM's U+FFFD repair: decode with 1..4 context ids and strip the clean context prefix."""
    for num_ctx in range(1, min(len(context), CONTEXT_WINDOW) + 1):
        ctx = list(context[-num_ctx:])
        full = decoder.decode_ids([*ctx, token_id])
        if full.endswith(_REPLACEMENT):
            continue
        clean_end = len(ctx)
        for j in range(len(ctx) - 1, -1, -1):
            if decoder.decode_ids([ctx[j]]).endswith(_REPLACEMENT):
                clean_end = j
            else:
                break
        prefix = decoder.decode_ids(ctx[:clean_end]) if clean_end > 0 else ""
        if full.startswith(prefix):
            return full[len(prefix) :]
        common = 0
        for a, b in zip(prefix, full):
            if a != b:
                break
            common += 1
        return full[common:]
    return ""


def _token_entry(
    token_id: int, logprob: float, context: Sequence[int], decoder: TokenDecoder
) -> dict[str, Any]:
    text = decoder.token_string(token_id)
    if text is None:
        return {"token": "", "logprob": logprob, "bytes": None}
    if text.endswith(_REPLACEMENT):
        text = _repair(token_id, context, decoder)
    return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8", errors="replace"))}


def chat_logprobs(
    positions: list[Position] | None,
    decoder: TokenDecoder,
    *,
    top_limit: int | None,
    context: Sequence[int] = (),
) -> dict[str, Any]:
    """`ChatCompletionLogProbs` as a dict (`{"content": None}` when the engine sent none)."""
    if positions is None:
        return {"content": None}
    ctx = list(context)
    content = []
    for pos in positions:
        tops = pos.top if top_limit is None else pos.top[:top_limit]
        entry = _token_entry(pos.sampled.token_id, pos.sampled.logprob, ctx, decoder)
        entry["top_logprobs"] = [_token_entry(t.token_id, t.logprob, ctx, decoder) for t in tops]
        content.append(entry)
        ctx.append(pos.sampled.token_id)
    return {"content": content}


def completion_logprobs(
    chat: dict[str, Any], positions: list[Position] | None, text_offset: int = 0
) -> dict[str, Any]:
    """Flat `CompletionLogProbs` from the chat form; positions without candidates give None."""
    out: dict[str, Any] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
    if chat["content"] is None or positions is None:
        return out
    offset = text_offset
    for entry, pos in zip(chat["content"], positions):
        out["text_offset"].append(offset)
        out["tokens"].append(entry["token"])
        out["token_logprobs"].append(entry["logprob"])
        out["top_logprobs"].append(
            {t["token"]: t["logprob"] for t in entry["top_logprobs"]} if pos.top else None
        )
        offset += len(entry["token"])
    return out
