"""Drivers shared by the derender tests: batch calls, and streams over a chosen split."""

from __future__ import annotations

import random
from typing import Any

import orjson

EOS = 151645  # Qwen3 <|im_end|>
REQUEST_ID = "generate-tokens-chatcmpl-test"
MESSAGES = [{"role": "user", "content": "hi"}]


def chat_request(**fields: Any) -> dict[str, Any]:
    return {"messages": MESSAGES, **fields}


def batch_chat(d, ids, *, finish="stop", stop_reason=None, logprobs=None, **body):  # noqa: ANN001,ANN003,ANN201
    choice = {"index": 0, "token_ids": list(ids), "finish_reason": finish, "stop_reason": stop_reason}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    gen = {"request_id": REQUEST_ID, "choices": [choice]}
    return d.derender_chat({"generate_response": gen, **body})


def splits_of(n: int, kind: str, seed: int = 0) -> list[int]:
    """Chunk sizes covering n tokens: 'one' per token, 'whole', or 'random'."""
    if kind == "one":
        return [1] * n
    if kind == "whole":
        return [n]
    rng = random.Random(seed)
    sizes = []
    while n > 0:
        size = min(rng.randint(1, 5), n)
        sizes.append(size)
        n -= size
    return sizes


def roundtrip(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


def stream(
    call,  # noqa: ANN001 - derenderer.derender_chat or derender_completion
    ids,  # noqa: ANN001
    sizes,  # noqa: ANN001
    *,
    finish="stop",  # noqa: ANN001
    stop_reason=None,  # noqa: ANN001
    finish_only_tail=False,  # noqa: ANN001
    first_body=None,  # noqa: ANN001
    every_body=None,  # noqa: ANN001
    later_body=None,  # noqa: ANN001
    logprobs=None,  # noqa: ANN001
    index=0,  # noqa: ANN001
    request_id=REQUEST_ID,  # noqa: ANN001
    usage_tail=False,  # noqa: ANN001
) -> list[dict[str, Any]]:
    """Send `ids` chunked by `sizes`; the state goes through JSON between calls."""
    state = None
    out = []
    pos = 0
    chunks = []
    for k, size in enumerate(sizes):
        last = k == len(sizes) - 1 and not finish_only_tail
        choice = {"index": index, "token_ids": list(ids[pos : pos + size]),
                  "finish_reason": finish if last else None,
                  "stop_reason": stop_reason if last else None}  # fmt: skip
        if logprobs is not None:
            choice["logprobs"] = {"content": logprobs["content"][pos : pos + size]}
        chunks.append({"request_id": request_id, "choices": [choice]})
        pos += size
    if finish_only_tail:
        chunks.append({"request_id": request_id, "choices": [
            {"index": index, "token_ids": [], "finish_reason": finish, "stop_reason": stop_reason}]})  # fmt: skip
    if usage_tail:
        chunks.append({"request_id": request_id, "choices": [],
                       "usage": {"prompt_tokens": 3, "completion_tokens": len(ids), "total_tokens": 3 + len(ids)}})  # fmt: skip
    for k, chunk in enumerate(chunks):
        body = {"stream": True, "generate_chunk": chunk, "stream_state": state}
        body.update(every_body or {})
        body.update((first_body or {}) if k == 0 else (later_body or {}))
        response = roundtrip(call(roundtrip(body)))
        out.append(response)
        state = response["stream_state"]
        if response.get("abort_engine_request"):
            break
    return out


def concat_chat(responses: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold chat stream deltas into a message-like dict."""
    content, reasoning = None, None
    calls: dict[int, dict[str, Any]] = {}
    finish = stop_reason = None
    for r in responses:
        for c in r["chunk"]["choices"]:
            d = c["delta"]
            if d["content"] is not None:
                content = (content or "") + d["content"]
            if d["reasoning"] is not None:
                reasoning = (reasoning or "") + d["reasoning"]
            for tc in d.get("tool_calls", []):
                call = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                if tc.get("id"):
                    call["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    call["name"] = fn["name"]
                call["arguments"] += fn.get("arguments") or ""
            if c["finish_reason"] is not None:
                finish, stop_reason = c["finish_reason"], c["stop_reason"]
    return {
        "content": content,
        "reasoning": reasoning,
        "tool_calls": [calls[i] for i in sorted(calls)],
        "finish_reason": finish,
        "stop_reason": stop_reason,
    }


def batch_view(response: dict[str, Any], index: int = 0) -> dict[str, Any]:
    choice = response["choices"][index]
    message = choice["message"]
    return {
        "content": message["content"],
        "reasoning": message["reasoning"],
        "tool_calls": [
            {"id": tc["id"], "name": tc["function"]["name"], "arguments": tc["function"]["arguments"]}
            for tc in message.get("tool_calls", [])
        ],
        "finish_reason": choice["finish_reason"],
        "stop_reason": choice["stop_reason"],
    }


def same_message(stream_view: dict[str, Any], batch: dict[str, Any]) -> bool:
    """Equal, except one fold: a batch `content: ""` matches a stream that sent no content.

    Why that fold exists (and nothing wider): vLLM's batch sets content to "" when the request
    forces tool calls and the model wrote none (`assemble_chat_message_fields`); a stream can
    only say that with an empty delta, which neither vLLM's stream nor ours sends. The
    differential tests apply it only to forcing requests (`ref_compare.stream_view_of_batch`).
    """
    if batch["content"] == "" and stream_view["content"] is None:
        batch = {**batch, "content": None}
    return stream_view == batch
