"""End to end against a REAL `vllm serve --tokens-only` engine (tests/harness fixtures):
our render -> engine generate (scripted output) -> our derender, batch and streaming, for
chat and completions.

The engine cannot take stop strings (tokens-only), so, as a gateway does, the test removes
`stop` from the sampling params it forwards and derender applies the stop strings.

Logprobs are checked in full against the tokenizer, independently of derender's code: each
position's sampled token is the engine's output token, its string is that token decoded
alone (a byte piece of a multi-token character is "" until the piece that completes it,
which carries the whole character, as vLLM's U+FFFD repair does), the strings concatenate to
the decoded output, and each position has exactly the number of candidates the request asked
for. Streams must fold to the batch result exactly (per-token data cut at a stop string:
see `ref_compare.cut_after`).
"""

from __future__ import annotations

from typing import Any

import pytest

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.derender_api import Derenderer

from ..harness.engine_api import generate, generate_stream
from ..harness.fixtures import tiny_model_dir, tokens_engine  # noqa: F401
from ..harness.script_protocol import script_extra_args
from .helpers import roundtrip
from .ref_compare import (
    chat_batch_views,
    completion_batch_views,
    cut_after,
    fold_chat,
    fold_completion,
    stream_view_of_batch,
)
from .test_parser_stream import CALL_T, CALL_W, TOOLS

pytestmark = pytest.mark.engine
REPLACEMENT = "\ufffd"


@pytest.fixture(scope="module")
def services(tiny_model_dir):  # noqa: ANN001, ANN201, F811
    config = ServiceConfig(model=str(tiny_model_dir), reasoning_parser="qwen3",
                           tool_call_parser="hermes", enable_auto_tool_choice=True,
                           stream_state_secret="e2e")  # fmt: skip
    renderer = Renderer(config)
    return renderer, Derenderer(config, renderer)


CHAT_SCENARIOS = {
    "reasoning-content-cjk-emoji": ("<think>\n想一想 😀 carefully.\n</think>\n\n答案是 42 👍🏽.", {}),
    "several-tool-calls": (f"<think>\nUse tools.\n</think>\n\n{CALL_W}\n{CALL_T}", {"tools": TOOLS}),
    "stop-string": ("<think>\nok\n</think>\n\nfirst part STOP second part", {"stop": ["STOP"]}),
    "logprobs": ("<think>\nx 🫠\n</think>\n\nwith logprobs 中文 𝔘", {"logprobs": True, "top_logprobs": 2}),
    "n2": ("<think>\nboth\n</think>\n\nsame script twice", {"n": 2}),
}
COMPLETION_SCENARIOS = {
    "completion-logprobs": (" melt 🫠, 中文 and 𝔘 café", {"logprobs": 2}),
    "completion-n2-stop-logprobs": (" first STOP after 😀", {"n": 2, "stop": ["STOP"], "logprobs": 0}),
    "completion-plain-return-ids": (" plain 👍🏽 text", {"return_token_ids": True}),
}


def _generate_body(rendered: dict[str, Any], script: list[int]) -> dict[str, Any]:
    params = dict(rendered["sampling_params"])
    params.pop("stop", None)  # tokens-only engines refuse stop strings; derender applies them
    params["max_tokens"] = len(script) + 4
    params["extra_args"] = {**(params.get("extra_args") or {}), **script_extra_args(script)}
    return {"request_id": rendered["request_id"], "token_ids": rendered["token_ids"],
            "sampling_params": params}  # fmt: skip


def _stream(call, events: list[dict], first: dict[str, Any]) -> tuple[list[dict], dict[int, int], set[int]]:  # noqa: ANN001
    """Derender an engine event stream keeping one state per choice index, like a gateway;
    also returns how many engine tokens each index was fed, and the indexes that asked for
    the abort. A gateway stops feeding a
    choice whose response asks for the abort (and aborts the engine request once no choice
    is left); the events recorded here keep coming for the other index."""
    states: dict[int, object] = {}
    responses, sent, aborted = [], {}, set()
    for event in events:
        index = event["choices"][0]["index"] if event["choices"] else 0
        if index in aborted:
            continue
        body = {"stream": True, "generate_chunk": event, "stream_state": states.get(index)}
        if index not in states:
            body.update(first)
        response = roundtrip(call(roundtrip(body)))
        states[index] = response["stream_state"]
        responses.append(response)
        sent[index] = sent.get(index, 0) + sum(len(c.get("token_ids") or ()) for c in event["choices"])
        if response.get("abort_engine_request"):
            aborted.add(index)
    return responses, sent, aborted


def _engine_ids(choice: dict[str, Any]) -> list[int]:
    """The sampled ids the engine's logprobs describe (integer or older placeholder form)."""
    out = []
    for entry in choice["logprobs"]["content"]:
        token_id = entry.get("token_id")
        out.append(token_id if token_id is not None else int(entry["token"].removeprefix("token_id:")))
    return out


def _check_token_strings(tokens: list[str], ids: list[int], tok) -> None:  # noqa: ANN001
    """Every string is its token decoded alone, with vLLM's byte-piece repair; they join up."""
    assert len(tokens) == len(ids)
    pending = []
    for token, token_id in zip(tokens, ids):
        alone = tok.decode([token_id])
        if not alone.endswith(REPLACEMENT):
            assert token == alone and not pending, (token, token_id, pending)
            continue
        pending.append(token_id)
        whole = tok.decode(pending)
        if whole.endswith(REPLACEMENT):
            assert token == "", (token, token_id)  # an incomplete piece
        else:
            assert token == whole, (token, pending)  # the piece that completes the character
            pending = []
    assert "".join(tokens) == tok.decode(ids)


def _candidate_string(text: str, token_id: int, tok) -> None:  # noqa: ANN001
    """A candidate is its id decoded alone, or for a byte piece "" or a repaired character."""
    alone = tok.decode([token_id])
    if alone.endswith(REPLACEMENT):
        assert REPLACEMENT not in text, (text, token_id)
    else:
        assert text == alone, (text, token_id)


def _check_chat_logprobs(choice: dict, engine_choice: dict, tok, top: int) -> None:  # noqa: ANN001
    ids = engine_choice["token_ids"]
    assert _engine_ids(engine_choice) == ids
    entries = choice["logprobs"]["content"]
    _check_token_strings([e["token"] for e in entries], ids, tok)
    for entry, engine_entry in zip(entries, engine_choice["logprobs"]["content"]):
        assert entry["logprob"] == engine_entry["logprob"]
        assert entry["bytes"] == list(entry["token"].encode())
        assert len(entry["top_logprobs"]) == top  # what the request asked for
        kept = engine_entry["top_logprobs"][:top]
        assert [t["logprob"] for t in entry["top_logprobs"]] == [t["logprob"] for t in kept]
        for candidate, engine_candidate in zip(entry["top_logprobs"], kept):
            _candidate_string(candidate["token"], engine_candidate["token_id"], tok)
            assert candidate["bytes"] == list(candidate["token"].encode())
        assert entry["top_logprobs"][0]["token"] == entry["token"]  # the sampled token leads


def _check_completion_logprobs(choice: dict, engine_choice: dict, tok, logprobs: int) -> None:  # noqa: ANN001
    ids = engine_choice["token_ids"]
    assert _engine_ids(engine_choice) == ids
    lp = choice["logprobs"]
    _check_token_strings(lp["tokens"], ids, tok)
    assert lp["token_logprobs"] == [e["logprob"] for e in engine_choice["logprobs"]["content"]]
    assert lp["text_offset"] == [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(ids))]
    engine_entries = engine_choice["logprobs"]["content"]
    for token, candidates, engine_entry in zip(lp["tokens"], lp["top_logprobs"], engine_entries):
        # The engine sends the sampled token first, then the best others: max(logprobs, 1)
        # candidates here, all within the cut (logprobs + 1). Equal strings share one key.
        kept = engine_entry["top_logprobs"][: logprobs + 1]
        assert len(kept) == max(logprobs, 1) and token in candidates
        for text, value in candidates.items():
            sources = [c for c in kept if c["logprob"] == value]
            assert sources, (text, value)
            _candidate_string(text, sources[-1]["token_id"], tok)
        alone = {tok.decode([c["token_id"]]) for c in kept}
        if not any(a.endswith(REPLACEMENT) for a in alone):
            assert set(candidates) == alone


@pytest.mark.parametrize("name", sorted(CHAT_SCENARIOS))
def test_chat_render_generate_derender(services, tokens_engine, name):  # noqa: ANN001, F811
    renderer, derenderer = services
    tok = renderer.bundle.hf_tokenizer
    text, extra = CHAT_SCENARIOS[name]
    request = {"messages": [{"role": "user", "content": "go"}], **extra}
    script = tok.encode(text, add_special_tokens=False)
    rendered = renderer.render_chat(request)
    body = _generate_body(rendered, script)
    prompt = rendered["token_ids"]

    gen = generate(tokens_engine, body)
    assert [c["token_ids"][: len(script)] for c in gen["choices"]] == [script] * len(gen["choices"])
    batch = derenderer.derender_chat({"generate_response": gen, "chat_request": request,
                                      "prompt_token_ids": prompt, "prompt_tokens": len(prompt)})  # fmt: skip
    assert len(batch["choices"]) == extra.get("n", 1)
    views = chat_batch_views(batch)
    view = views[0]
    if name == "stop-string":
        assert view["content"] == "\n\nfirst part " and view["stop_reason"] == "STOP"
    if name == "several-tool-calls":
        assert [c["name"] for c in view["tool_calls"]] == ["get_weather", "get_time"]
        assert view["finish_reason"] == "tool_calls"
    if name == "reasoning-content-cjk-emoji":
        assert view["reasoning"] == "\n想一想 😀 carefully.\n" and view["content"] == "\n\n答案是 42 👍🏽."
    if name == "logprobs":
        _check_chat_logprobs(batch["choices"][0], gen["choices"][0], tok, top=extra["top_logprobs"])
    if name == "n2":
        assert views[1] == view

    events = generate_stream(tokens_engine, body).events
    responses, sent, aborted = _stream(derenderer.derender_chat, events, {"chat_request": request, "prompt_token_ids": prompt})
    folded = fold_chat(responses)
    assert sorted(folded) == sorted(views)
    for index, streamed in folded.items():
        assert streamed.pop("roles") == 1
        want = stream_view_of_batch(views[index], request)
        if "stop" in extra:
            # The stop string asks for the abort; how many tokens came after it in the same
            # engine event depends on the engine's step timing, so only the ask is checked.
            assert index in aborted and sent[index] <= len(gen["choices"][index]["token_ids"])
            want = cut_after(want, sent[index])
        assert streamed == want, index


@pytest.mark.parametrize("name", sorted(COMPLETION_SCENARIOS))
def test_completion_render_generate_derender(services, tokens_engine, name):  # noqa: ANN001, F811
    renderer, derenderer = services
    tok = renderer.bundle.hf_tokenizer
    text, extra = COMPLETION_SCENARIOS[name]
    request = {"prompt": "The answer is", **extra}
    script = tok.encode(text, add_special_tokens=False)
    (rendered,) = renderer.render_completion(request)
    body = _generate_body(rendered, script)
    prompt = rendered["token_ids"]

    gen = generate(tokens_engine, body)
    assert [c["token_ids"][: len(script)] for c in gen["choices"]] == [script] * extra.get("n", 1)
    batch = derenderer.derender_completion({"generate_responses": [gen], "completion_request": request,
                                            "prompt_token_ids": [prompt], "prompt_tokens": [len(prompt)]})  # fmt: skip
    views = completion_batch_views(batch)
    assert sorted(views) == list(range(extra.get("n", 1)))
    for index, choice in enumerate(batch["choices"]):
        if "stop" in extra:
            assert (choice["text"], choice["stop_reason"]) == (" first ", "STOP")
        else:
            assert choice["text"] == text and choice["finish_reason"] == "stop"
        if "logprobs" in extra:
            _check_completion_logprobs(choice, gen["choices"][index], tok, extra["logprobs"])
        if extra.get("return_token_ids"):
            assert choice["token_ids"] == gen["choices"][index]["token_ids"]
            assert choice["prompt_token_ids"] == gen.get("prompt_token_ids")  # vLLM: the engine's

    events = generate_stream(tokens_engine, body).events
    responses, sent, aborted = _stream(derenderer.derender_completion, events,
                              {"completion_request": request, "prompt_token_ids": prompt,
                               "prompt_tokens": len(prompt)})  # fmt: skip
    folded = fold_completion(responses)
    assert sorted(folded) == sorted(views)
    for index, streamed in folded.items():
        want = views[index]
        if "stop" in extra:
            # The stop string asks for the abort; how many tokens came after it in the same
            # engine event depends on the engine's step timing, so only the ask is checked.
            assert index in aborted and sent[index] <= len(gen["choices"][index]["token_ids"])
            want = cut_after(want, sent[index])
        assert streamed == want, index
