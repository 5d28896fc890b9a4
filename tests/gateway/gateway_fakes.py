"""A tiny render/derender stand-in for the gateway's unit tests (the real one is tested e2e).

Tokens are characters: id = ord(char) for printable ASCII (so scripts read as text), any other
id decodes as "<id>"; EOS (151645) is dropped like a stop token. Streaming derender keeps the
text released so far in its state, matches stop strings across chunks, cuts exactly, and sets
`abort_engine_request` on a match, as the real Derenderer's contract says.
"""

from __future__ import annotations

import itertools
from typing import Any

from render_service.gateway.testing import EOS_ID

MODEL = "fake-model"
_ids = itertools.count()


def text_of(ids: list[int]) -> str:
    return "".join(chr(t) if 32 <= t < 127 else f"<{t}>" for t in ids if t != EOS_ID)


def ids_of(text: str) -> list[int]:
    return [ord(c) for c in text]


def _cut(text: str, stops: list[str]) -> tuple[str, str | None]:
    hits = [(text.find(s), s) for s in stops if s and s in text]
    if not hits:
        return text, None
    pos, stop = min(hits)
    return text[:pos], stop


class FakeCodec:
    has_parser = False
    accepts_images = False
    fingerprint = "0123456789abcdef"
    tool_parser = None

    def reasoning_usage(self, chat_body: dict[str, Any]) -> None:
        return None  # no reasoning parser: usage details stay null

    def render_chat(self, body: dict[str, Any], request_id_header: str | None,
                    fetched_media: Any = None) -> dict[str, Any]:
        prompt = "".join(str(m.get("content", "")) for m in body["messages"])
        return self._request("chatcmpl-", prompt, body, request_id_header)

    def render_completion(self, body: dict[str, Any], request_id_header: str | None
                          ) -> list[dict[str, Any]]:
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        base = self._request("cmpl-", prompts[0], body, request_id_header)["request_id"]
        out = []
        for i, prompt in enumerate(prompts):
            rid = base if len(prompts) == 1 else f"{base}-{i}"
            out.append(self._request("", prompt, body, None) | {"request_id": rid})
        return out

    def _request(self, prefix: str, prompt: str | list[int], body: dict[str, Any], header: str | None
                 ) -> dict[str, Any]:
        rid = header or body.get("request_id") or f"fake{next(_ids)}"
        max_tokens = body.get("max_tokens", 64)
        if body.get("echo") and max_tokens == 0:
            max_tokens = 1  # vLLM: echo without generation still runs one step
        sampling = {"max_tokens": max_tokens, "n": body.get("n", 1),
                    "stop": body.get("stop") or [], "min_tokens": 0, "output_kind": 2}
        if body.get("vllm_xargs"):
            sampling["extra_args"] = dict(body["vllm_xargs"])
        if body.get("prompt_logprobs") is not None:
            sampling["prompt_logprobs"] = body["prompt_logprobs"]
        token_ids = list(prompt) if isinstance(prompt, list) else ids_of(prompt)
        return {"request_id": prefix + rid, "token_ids": token_ids or [1],
                "sampling_params": sampling, "model": body.get("model"), "stream": bool(body.get("stream")),
                "stream_options": body.get("stream_options"), "kv_transfer_params": None}

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL, "object": "model"}]}

    def prompt_text(self, token_ids: list[int]) -> str:
        return text_of(token_ids)

    # -- derender ---------------------------------------------------------------------------
    def derender_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("stream"):
            return self._stream(body, chat=True)
        request, response = body["chat_request"], body["generate_response"]
        choices = []
        for c in response["choices"]:
            text, stop = self._final_text(c, request)
            choices.append({"index": c["index"], "message": {"role": "assistant", "content": text},
                            "logprobs": None, "finish_reason": c["finish_reason"],
                            "stop_reason": stop or c["stop_reason"]})
        return {"id": response["request_id"], "object": "chat.completion", "created": 1,
                "model": body["model"], "choices": choices, "usage": self._usage(body, response),
                "prompt_logprobs": response.get("prompt_logprobs")}

    def derender_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("stream"):
            return self._stream(body, chat=False)
        request = body["completion_request"]
        choices, index = [], 0
        for response in body["generate_responses"]:
            for c in response["choices"]:
                text, stop = self._final_text(c, request)
                choices.append({"index": index, "text": text, "logprobs": None,
                                "finish_reason": c["finish_reason"], "stop_reason": stop or c["stop_reason"]})
                index += 1
        completion = sum(len(c["token_ids"]) for r in body["generate_responses"] for c in r["choices"])
        prompt = sum(body["prompt_tokens"])
        return {"id": body["generate_responses"][0]["request_id"], "object": "text_completion",
                "created": 1, "model": body["model"], "choices": choices,
                "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                          "completion_tokens": completion}}

    def _final_text(self, choice: dict[str, Any], request: dict[str, Any]) -> tuple[str, str | None]:
        text = text_of(choice["token_ids"])
        stops = [choice["stop_reason"]] if isinstance(choice["stop_reason"], str) else _stops(request)
        return _cut(text, stops)

    def _usage(self, body: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        completion = sum(len(c["token_ids"]) for c in response["choices"])
        return {"prompt_tokens": body["prompt_tokens"], "total_tokens": body["prompt_tokens"] + completion,
                "completion_tokens": completion}

    def _stream(self, body: dict[str, Any], *, chat: bool) -> dict[str, Any]:
        # Like the real one: the request comes on the first step only; the state carries it on.
        state = body.get("stream_state") or {
            "text": "", "sent": 0, "stop": _stops(body["chat_request" if chat else "completion_request"])}
        request = {"stop": state["stop"]}
        chunk = body["generate_chunk"]
        if not chunk["choices"]:
            return {"chunk": {"id": chunk["request_id"], "choices": []}, "stream_state": state}
        c = chunk["choices"][0]
        text = state["text"] + text_of(c["token_ids"] or [])
        cut, stop = _cut(text, _stops(request))
        if stop is None and c["finish_reason"] is None:
            cut = cut[:len(cut) - _held(cut, _stops(request))]
        new = cut[state["sent"]:]
        finish, stop_reason = c["finish_reason"], c["stop_reason"]
        if stop is not None:
            finish, stop_reason = "stop", stop
        piece = {"delta": {"role": None, "content": new or None}} if chat else {"text": new}
        out = {"index": c["index"], **piece, "logprobs": None, "finish_reason": finish,
               "stop_reason": stop_reason if finish else None, "token_ids": c["token_ids"]}
        result: dict[str, Any] = {"chunk": {"id": chunk["request_id"], "choices": [out]},
                                  "stream_state": {**state, "text": text, "sent": len(cut)}}
        if stop is not None:
            result["abort_engine_request"] = True
        return result


def _held(text: str, stops: list[str]) -> int:
    """Length of the longest suffix of `text` that could still begin a stop string."""
    return max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)


def _stops(request: dict[str, Any]) -> list[str]:
    stop = request.get("stop") or []
    return [stop] if isinstance(stop, str) else list(stop)
