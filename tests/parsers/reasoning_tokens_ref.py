"""Runs inside the vLLM 0.33 reference venv: reasoning-token counts with vLLM's own objects.

The `reasoning_tokens` op of vllm_ref_helper.py (the session's reference process) calls `run`
once per case. Per case:

* batch: what chat serving's non-streamed path reports: `set_prompt_token_ids`,
  `parser.parse(text, ...)`, then `parser.count_reasoning_tokens(output ids)`
  (openai/chat_completion/serving.py chat_completion_full_generator);
* stream: the streamed path, fed one token at a time, in one step, and (when the case has
  `chunks`, token counts per step) in those steps: the step text
  comes from vLLM serve's own detokenizer (`vllm.v1.engine.detokenizer`, with the case's
  skip_special_tokens and stop strings), then `ChatStreamProcessor.step` and
  `count_reasoning_tokens(all ids so far)` after every step (continuous_usage_stats).
  The last token is treated as stop-terminated (not detokenized) when it is an EOS id.
"""

from __future__ import annotations

from types import SimpleNamespace

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.chat_completion.stream_processor import (
    ChatStreamProcessor,
)
from vllm.parser import ParserManager
from vllm.v1.engine.detokenizer import IncrementalDetokenizer


def make_parser(case, tok, request):
    parser_cls = ParserManager.get_parser(
        tool_parser_name=case.get("tool_parser"),
        reasoning_parser_name=case["reasoning_parser"],
        enable_auto_tools=True,
    )
    parser = parser_cls(tok, request.tools, chat_template_kwargs=case["kwargs"], model_config=None)
    return parser_cls, parser


def batch_count(case, tok, request) -> int:
    _, parser = make_parser(case, tok, request)
    ids = case["ids"]
    parser.set_prompt_token_ids(case["prompt_ids"])
    text = tok.decode(ids, skip_special_tokens=case["skip_special_tokens"])
    parser.parse(text, request, enable_auto_tools=True, model_output_token_ids=ids)
    return parser.count_reasoning_tokens(ids)


def stream_counts(case, tok, request, chunks):
    parser_cls, parser = make_parser(case, tok, request)
    processor = ChatStreamProcessor(request, parser, enable_auto_tools=True, parser_cls=parser_cls)
    params = SimpleNamespace(
        stop=case.get("stop") or None, min_tokens=0, include_stop_str_in_output=False,
        skip_special_tokens=case["skip_special_tokens"], spaces_between_special_tokens=True)
    engine_request = SimpleNamespace(sampling_params=params, prompt_token_ids=case["prompt_ids"],
                                     request_id="r")
    detok = IncrementalDetokenizer.from_new_request(tok, engine_request)
    eos = set(case.get("eos_ids") or [])
    ids, texts, counts, start = case["ids"], [], [], 0
    for k, n in enumerate(chunks):
        step = ids[start:start + n]
        start += n
        last = k == len(chunks) - 1
        stop_terminated = last and bool(step) and step[-1] in eos
        detok.update(step, stop_terminated)
        text = detok.get_next_output_text(last, delta=True)
        texts.append(text)
        processor.step(text, step, "stop" if last else None, case["prompt_ids"])
        counts.append(parser.count_reasoning_tokens(tuple(ids[:start])))
    return {"texts": texts, "counts": counts}


def run(case, tokenizer):
    """All counts for one case; `tokenizer(directory, loader)` is the helper's cached loader."""
    tok = tokenizer(case["tokenizer_dir"], case["loader"])
    request = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}],
         "chat_template_kwargs": case["kwargs"], **(case.get("request") or {})})
    out = {"batch": batch_count(case, tok, request)}
    ids = case["ids"]
    out["one_by_one"] = stream_counts(case, tok, request, [1] * len(ids))
    out["whole"] = stream_counts(case, tok, request, [len(ids)])
    if case.get("chunks"):
        out["chunked"] = stream_counts(case, tok, request, case["chunks"])
    return out
