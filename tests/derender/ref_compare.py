"""Drivers and views for the differential tests against the vLLM 0.33 reference derender.

Comparison rules (used by every test_differential* module):
- batch: our response equals vLLM's, key order included; only `created` (a clock) and the
  tool-call ids (random in vLLM, deterministic in ours) are normalised.
- stream: each side's chunks are folded per choice index into a message view
  (`fold_chat` / `fold_completion`): concatenated text parts, tool calls, the finish and stop
  reasons, logprobs entries and token ids in order. Our fold must equal our batch view, and
  vLLM's batch view; where vLLM's own stream agrees with its batch it then equals vLLM's fold
  too. The cases where vLLM's stream disagrees with its batch are named in the test modules.
- the one fold we keep: `stream_view_of_batch`. vLLM's batch sets `content: ""` when the
  request forces tool calls (`tool_choice` "required" or a named function) and the model
  wrote no content (`assemble_chat_message_fields`: `content = content or ""`). A stream
  has no way to say "" except an empty delta, which neither vLLM's stream nor ours sends, so
  the streamed view of that batch message has content None.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from .helpers import roundtrip

Call = Callable[[dict[str, Any]], dict[str, Any]]
# vLLM's ids, or the 9 alphanumerics Mistral tool calls carry (mistral tool parser).
_TOOL_ID = re.compile(r"^(chatcmpl-tool-[0-9a-f]+|[A-Za-z0-9]{9})$")


def ref_call(server, path: str) -> Call:  # noqa: ANN001
    def call(body: dict[str, Any]) -> dict[str, Any]:
        response = server.post(path, body)
        assert response.status_code == 200, response.text
        return response.json()

    return call


def ref_status(server, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:  # noqa: ANN001
    response = server.post(path, body)
    return response.status_code, response.json()


def normalise(response: dict[str, Any]) -> dict[str, Any]:
    """A response (batch or one stream chunk) without its clock and with tool ids by shape."""
    out = roundtrip(response)
    out.pop("created", None)
    for choice in out.get("choices", []):
        message = choice.get("message") or choice.get("delta") or {}
        for call in message.get("tool_calls") or []:
            if call.get("id") is not None:
                assert _TOOL_ID.match(call["id"]), call
                call["id"] = "<id>"
    return out


def skeleton(chunk: dict[str, Any]) -> dict[str, Any]:
    """A stream chunk without its text: where a delta's text lands may differ between two
    correct implementations (how long a possible marker is held back), everything else in
    the chunk (keys, index, logprobs, token ids, reasons, usage) must not."""
    out = normalise(chunk)
    for choice in out["choices"]:
        choice.pop("text", None)
        for part in ("content", "reasoning", "tool_calls"):
            (choice.get("delta") or {}).pop(part, None)
    return out


def forces_tools(chat_request: dict[str, Any] | None) -> bool:
    choice = (chat_request or {}).get("tool_choice")
    return isinstance(choice, dict) or choice == "required"


def chat_batch_views(response: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per choice index: the fields a stream can reproduce, from a batch chat response."""
    views = {}
    for choice in normalise(response)["choices"]:
        message = choice["message"]
        calls = [{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                 for c in message.get("tool_calls") or []]  # fmt: skip
        views[choice["index"]] = {
            "content": message["content"],
            "reasoning": message["reasoning"],
            "tool_calls": calls,
            "finish_reason": choice["finish_reason"],
            "stop_reason": choice["stop_reason"],
            "logprobs": (choice["logprobs"] or {}).get("content"),
            "token_ids": choice.get("token_ids"),
        }
    return views


def stream_view_of_batch(view: dict[str, Any], chat_request: dict[str, Any] | None) -> dict[str, Any]:
    """The streamed form of a batch view: the forced-tools `content: ""` becomes None (see top)."""
    if view["content"] == "" and forces_tools(chat_request):
        return {**view, "content": None}
    return view


def cut_after(view: dict[str, Any], tokens: int) -> dict[str, Any]:
    """A batch view's per-token lists (logprobs, token ids) cut to the first `tokens` tokens.

    Kept difference: our stream ends a choice at the chunk that completes a stop string (and
    asks for the engine request to be aborted), so per-token data of engine tokens after that
    chunk is never sent; vLLM's batch derender, given the whole engine output, lists them all
    (a text-mode engine would have stopped generating there)."""
    out = dict(view)
    for key in ("logprobs", "token_ids"):
        if out.get(key) is not None:
            out[key] = out[key][:tokens]
    return out


def fold_chat(responses: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Fold chat stream responses (`{"chunk": ...}` or bare chunks) per choice index."""
    views: dict[int, dict[str, Any]] = {}
    calls: dict[int, dict[int, dict[str, Any]]] = {}
    for response in responses:
        chunk = normalise(response.get("chunk", response))
        for choice in chunk["choices"]:
            view = views.setdefault(choice["index"], {
                "content": None, "reasoning": None, "tool_calls": [], "finish_reason": None,
                "stop_reason": None, "logprobs": None, "token_ids": None, "roles": 0})  # fmt: skip
            delta = choice["delta"]
            view["roles"] += delta.get("role") == "assistant"
            for part in ("content", "reasoning"):
                if delta.get(part) is not None:
                    view[part] = (view[part] or "") + delta[part]
            for tc in delta.get("tool_calls") or []:
                call = calls.setdefault(choice["index"], {}).setdefault(
                    tc["index"], {"id": None, "name": None, "arguments": ""})
                call["id"] = tc.get("id") or call["id"]
                function = tc.get("function") or {}
                call["name"] = function.get("name") or call["name"]
                call["arguments"] += function.get("arguments") or ""
            _fold_common(view, choice, (choice.get("logprobs") or {}).get("content"))
    for index, view in views.items():
        view["tool_calls"] = [calls.get(index, {})[k] for k in sorted(calls.get(index, {}))]
    return views


def fold_completion(responses: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Fold completion stream responses per choice index (text and flat logprobs lists)."""
    views: dict[int, dict[str, Any]] = {}
    for response in responses:
        chunk = normalise(response.get("chunk", response))
        for choice in chunk["choices"]:
            view = views.setdefault(choice["index"], {
                "text": "", "finish_reason": None, "stop_reason": None, "logprobs": None,
                "token_ids": None})  # fmt: skip
            view["text"] += choice["text"]
            lp = choice.get("logprobs")
            entries = None
            if lp is not None:
                entries = [list(e) for e in zip(lp["text_offset"], lp["token_logprobs"], lp["tokens"],
                                                lp["top_logprobs"])]  # fmt: skip
            _fold_common(view, choice, entries)
    return views


def completion_batch_views(response: dict[str, Any]) -> dict[int, dict[str, Any]]:
    views = {}
    for choice in normalise(response)["choices"]:
        lp = choice["logprobs"]
        entries = None if lp is None else [
            list(e) for e in zip(lp["text_offset"], lp["token_logprobs"], lp["tokens"], lp["top_logprobs"])]  # fmt: skip
        views[choice["index"]] = {
            "text": choice["text"],
            "finish_reason": choice["finish_reason"],
            "stop_reason": choice["stop_reason"],
            "logprobs": entries,
            "token_ids": choice.get("token_ids"),
        }
    return views


def _fold_common(view: dict[str, Any], choice: dict[str, Any], entries: list | None) -> None:
    if choice["finish_reason"] is not None:
        view["finish_reason"], view["stop_reason"] = choice["finish_reason"], choice["stop_reason"]
    if entries is not None:
        view["logprobs"] = (view["logprobs"] or []) + entries
    if choice.get("token_ids") is not None:
        view["token_ids"] = (view["token_ids"] or []) + choice["token_ids"]


def chunk_bodies(
    outputs: dict[int, list[int]],
    sizes: Callable[[int, int], list[int]],
    *,
    finish: dict[int, str] | None = None,
    stop_reason: dict[int, Any] | None = None,
    logprobs: dict[int, dict[str, Any]] | None = None,
    request_id: str = "generate-tokens-ref",
    prompt_token_ids: list[int] | None = None,
) -> list[dict[str, Any]]:
    """Engine stream chunks for several choices, interleaved round-robin like vLLM's generate
    stream (one choice per chunk); `sizes(index, n)` splits choice `index`'s n ids."""
    per_index: dict[int, list[dict[str, Any]]] = {}
    for index, ids in outputs.items():
        pos, chunks = 0, []
        parts = sizes(index, len(ids))
        for k, size in enumerate(parts):
            last = k == len(parts) - 1
            choice = {"index": index, "token_ids": ids[pos : pos + size],
                      "finish_reason": (finish or {}).get(index, "stop") if last else None,
                      "stop_reason": (stop_reason or {}).get(index) if last else None}  # fmt: skip
            if logprobs and index in logprobs:
                choice["logprobs"] = {"content": logprobs[index]["content"][pos : pos + size]}
            chunk = {"request_id": request_id, "choices": [choice]}
            if prompt_token_ids is not None:
                chunk["prompt_token_ids"] = prompt_token_ids
            chunks.append(chunk)
            pos += size
        per_index[index] = chunks
    order = []
    for k in range(max(len(c) for c in per_index.values())):
        order.extend(chunks[k] for chunks in per_index.values() if k < len(chunks))
    return order


def run_stream(
    call: Call,
    chunks: list[dict[str, Any]],
    first: dict[str, Any],
    every: dict[str, Any],
    sent: dict[int, int] | None = None,
) -> list[dict]:
    """Send `chunks` keeping one stream_state per choice index (JSON round trip between calls).
    `first` goes with each index's first chunk, `every` with all chunks. Stops feeding an
    index once its response asks for the engine request to be aborted; `sent` (if given)
    receives the number of engine tokens fed per index."""
    states: dict[int, Any] = {}
    aborted: set[int] = set()
    out = []
    for chunk in chunks:
        index = chunk["choices"][0]["index"]
        if index in aborted:
            continue
        body = {"stream": True, "generate_chunk": chunk, "stream_state": states.get(index), **every}
        if index not in states:
            body.update(first)
        response = roundtrip(call(roundtrip(body)))
        out.append(response)
        if sent is not None:
            sent[index] = sent.get(index, 0) + len(chunk["choices"][0]["token_ids"])
        states[index] = response["stream_state"]
        if response.get("abort_engine_request"):
            aborted.add(index)
    return out


def int_logprobs(ids: Sequence[int], tops: int = 2) -> dict[str, Any]:
    """vLLM 0.33 `GenerateLogProbs`: the sampled id first, then `tops - 1` other candidates."""
    return {"content": [
        {"token_id": t, "logprob": -0.25, "rank": 1, "top_logprobs": [{"token_id": t, "logprob": -0.25, "rank": 1}] + [
            {"token_id": t + k, "logprob": -1.0 - k, "rank": k + 1} for k in range(1, tops)]}
        for t in ids]}  # fmt: skip


def old_form(logprobs: dict[str, Any]) -> dict[str, Any]:
    """The same logprobs in the older `{"token": "token_id:N", "bytes": null}` form."""

    def one(c: dict[str, Any]) -> dict[str, Any]:
        return {"token": f"token_id:{c['token_id']}", "logprob": c["logprob"], "bytes": None}

    return {"content": [{**one(e), "top_logprobs": [one(t) for t in e["top_logprobs"]]}
                        for e in logprobs["content"]]}  # fmt: skip
