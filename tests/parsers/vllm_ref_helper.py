"""Runs inside the vLLM 0.33 reference venv: answers parser/detokenizer questions with vLLM's code.

Protocol: one JSON object per line on stdin, one JSON object per line on stdout
({"ok": true, "result": ...} or {"ok": false, "error": "..."}). Started once per test session
(the `vllm_ref` fixture of tests/conftest.py; importing vLLM takes many seconds). Ops:

* detok: vLLM derender decoding (`_seed_stream_state` + `OnlineDerenderer._detokenize_delta`)
  of `ids` seeded with `prompt_ids`, fed in `chunks` (token counts) -> list of texts per chunk
  (`spaces_between_special_tokens`, default true, is passed through as derender does).
* parse: derender's batch path (`Parser.parse` + `assemble_chat_message_fields`).
* stream: the streaming path (`ChatStreamProcessor.step` per chunk on one parser; the replay
  algorithm rebuilds this same parser state) -> concatenated deltas.
* replay_cpu: CPU seconds of derender's replay algorithm over token chunks (for bench/).
* reasoning_tokens: vLLM's reasoning-token counts for `cases` (reasoning_tokens_ref.py).
* chat_templates: chat templates rendered by this venv's transformers (vLLM 0.33 pins <5.21).
* family: any registered tool and/or reasoning parser on many cases in one call: composed
  batch, tool parser alone, reasoning parser alone, composed stream with its per-chunk
  tool-call deltas, and reasoning-token counts (see `op_family`; client: family_oracle.py).

Tokenizers are loaded from a directory. loader "auto" is AutoTokenizer (what vLLM does);
"backend" forces transformers' TokenizersBackend over tokenizer.json, needed for DeepSeek-R1
because transformers 5.19 (this venv) loads its tokenizer_class LlamaTokenizerFast as a
SentencePiece-style LlamaTokenizer and decodes its ByteLevel vocabulary wrongly.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections import OrderedDict

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from vllm.entrypoints.openai.chat_completion.message_assembly import (  # noqa: E402
    assemble_chat_message_fields,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.entrypoints.openai.chat_completion.stream_processor import (  # noqa: E402
    ChatStreamProcessor,
)
from vllm.parser import ParserManager  # noqa: E402
from vllm.renderers.online_derenderer import (  # noqa: E402
    OnlineDerenderer,
    _seed_stream_state,
)
from vllm.tokenizers.hf import get_cached_tokenizer  # noqa: E402

# The most recently used tokenizers (~30 MB each): one per family, and a session asks for 80.
_TOKENIZERS: OrderedDict[tuple[str, str], object] = OrderedDict()
_TOKENIZERS_KEPT = 32


def tokenizer(directory: str, loader: str):
    key = (directory, loader)
    if key in _TOKENIZERS:
        _TOKENIZERS.move_to_end(key)
    else:
        while len(_TOKENIZERS) >= _TOKENIZERS_KEPT:
            _TOKENIZERS.popitem(last=False)
        if loader == "backend":
            from transformers import TokenizersBackend

            tok = TokenizersBackend.from_pretrained(directory)
        else:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(directory)
        _TOKENIZERS[key] = get_cached_tokenizer(tok)
    return _TOKENIZERS[key]


def detokenize(tok, ids, state, skip_special, spaces_between=True):
    return OnlineDerenderer._detokenize_delta(
        None, tok, list(ids), state, skip_special_tokens=skip_special,
        spaces_between_special_tokens=spaces_between,
    )


def op_detok(req):
    tok = tokenizer(req["tokenizer_dir"], req.get("loader", "auto"))
    skip = req["skip_special_tokens"]
    state = _seed_stream_state(tok, req.get("prompt_ids"), skip_special_tokens=skip)
    ids = req["ids"]
    out, start = [], 0
    for n in req.get("chunks") or [len(ids)]:
        text, state = detokenize(tok, ids[start : start + n], state, skip,
                                 req.get("spaces_between_special_tokens", True))
        out.append(text)
        start += n
    return {"texts": out, "state": state.model_dump(include={"prev_tokens", "prefix_offset", "read_offset"})}


def _request(req):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **req.get("request", {})}
    return ChatCompletionRequest.model_validate(body)


def _parser_cls(req, tok=None):
    extra = {} if tok is None else {"tokenizer": tok}  # unified parsers check the vocabulary
    return ParserManager.get_parser(
        tool_parser_name=req.get("tool_parser"),
        reasoning_parser_name=req.get("reasoning_parser"),
        enable_auto_tools=req.get("enable_auto_tools", True),
        is_harmony=req.get("is_harmony", False), **extra,
    )


def _make_parser(req, tok, request, parser_cls):
    return parser_cls(
        tok, request.tools, chat_template_kwargs=req.get("chat_template_kwargs") or {},
        model_config=None,
    )


def op_parse(req):
    tok = tokenizer(req["tokenizer_dir"], req.get("loader", "auto"))
    request = _request(req)
    parser_cls = _parser_cls(req)
    parser = _make_parser(req, tok, request, parser_cls)
    if req.get("prompt_token_ids") is not None:
        parser.set_prompt_token_ids(req["prompt_token_ids"])
    enable_auto = req.get("enable_auto_tools", True)
    reasoning, content, tool_calls = parser.parse(
        req["text"], request, enable_auto_tools=enable_auto,
        model_output_token_ids=req.get("token_ids") or (),
    )
    fields = assemble_chat_message_fields(
        request, reasoning, content, tool_calls, enable_auto_tools=enable_auto,
        parser_cls=parser_cls,
    )
    return {
        "raw": {"reasoning": reasoning, "content": content},
        "reasoning": fields.reasoning,
        "content": fields.content,
        "tool_calls": [
            {"name": tc.function.name, "arguments": tc.function.arguments}
            for tc in fields.tool_calls
        ],
    }


def op_stream(req):
    tok = tokenizer(req["tokenizer_dir"], req.get("loader", "auto"))
    request = _request(req)
    parser_cls = _parser_cls(req)
    processor = ChatStreamProcessor(
        request, _make_parser(req, tok, request, parser_cls),
        enable_auto_tools=req.get("enable_auto_tools", True), parser_cls=parser_cls,
    )
    reasoning, content, calls = [], [], {}
    chunks = req["chunks"]
    for i, (text, ids) in enumerate(chunks):
        finish = "stop" if i == len(chunks) - 1 else None
        delta, _ = processor.step(text, ids, finish, req.get("prompt_token_ids"))
        if delta is None:
            continue
        reasoning.append(delta.reasoning or "")
        content.append(delta.content or "")
        for tc in delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            if tc.function is not None:
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
    return {
        "reasoning": "".join(reasoning),
        "content": "".join(content),
        "tool_calls": [calls[i] for i in sorted(calls)],
    }


def op_replay_cpu(req):
    """Derender's parser-path replay: chunk k rebuilds a parser and replays chunks 0..k-1."""
    tok = tokenizer(req["tokenizer_dir"], req.get("loader", "auto"))
    request = _request(req)
    parser_cls = _parser_cls(req, tok)
    prompt_ids = req["prompt_token_ids"]
    ids = req["ids"]
    per_chunk = []
    start_all = time.process_time()
    for k in req.get("sample_ks") or range(len(ids)):
        t0 = time.process_time()
        processor = ChatStreamProcessor(
            request, _make_parser(req, tok, request, parser_cls),
            enable_auto_tools=req.get("enable_auto_tools", True), parser_cls=parser_cls,
        )
        state = _seed_stream_state(tok, prompt_ids, skip_special_tokens=False)
        for j in range(k):
            text, state = detokenize(tok, ids[j : j + 1], state, False)
            processor.step(text, ids[j : j + 1], None, prompt_ids)
        text, state = detokenize(tok, ids[k : k + 1], state, False)
        finish = "stop" if k == len(ids) - 1 else None
        processor.step(text, ids[k : k + 1], finish, prompt_ids)
        per_chunk.append([k, time.process_time() - t0])
    return {"total_cpu_s": time.process_time() - start_all, "per_chunk_cpu_s": per_chunk}


def op_tool_traits(req):
    from vllm.parser.response_template import response_template_parser_cls
    from vllm.tool_parsers import ToolParserManager

    out = {}
    for name in req["names"]:
        cls = ToolParserManager.get_tool_parser(name)
        out[name] = [bool(cls.supports_required_and_named),
                     bool(getattr(cls, "engine_based_streaming", False)),
                     getattr(cls, "structural_tag_model", None),
                     cls.default_tool_strict_level.name.lower(),
                     response_template_parser_cls(cls) is not None]
    return out


def op_reasoning_tokens(req):
    import reasoning_tokens_ref  # next to this script; imports more of vLLM, so only when asked

    return [reasoning_tokens_ref.run(case, tokenizer) for case in req["cases"]]


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _calls(tool_calls) -> list[dict]:
    out = []
    for tc in tool_calls or []:
        fn = getattr(tc, "function", None)
        if fn is None:  # the composed Parser's own FunctionCall-like objects
            out.append({"name": getattr(tc, "name", None),
                        "arguments": getattr(tc, "arguments", None), "id": getattr(tc, "id", None)})
        else:
            out.append({"name": fn.name, "arguments": fn.arguments, "id": getattr(tc, "id", None)})
    return out


def _family_request(req):
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **(req.get("request") or {})}
    if req.get("tools"):
        body["tools"] = req["tools"]
    if req.get("chat_template_kwargs") is not None:
        body.setdefault("chat_template_kwargs", req["chat_template_kwargs"])
    return ChatCompletionRequest.model_validate(body)


def _family_batch(req, tok, parser_cls, text, ids):
    request = _family_request(req)
    prompt_ids = req.get("prompt_token_ids")
    parser = _make_parser(req, tok, request, parser_cls)
    if req.get("adjust_request"):
        request = parser.adjust_request(request)
    if prompt_ids is not None:
        parser.set_prompt_token_ids(prompt_ids)
    enable_auto = req.get("enable_auto_tools", True)
    reasoning, content, tool_calls = parser.parse(
        text, request, enable_auto_tools=enable_auto, model_output_token_ids=ids or (),
    )
    raw = {"reasoning": reasoning, "content": content, "tool_calls": _calls(tool_calls)}
    fields = assemble_chat_message_fields(
        request, reasoning, content, tool_calls, enable_auto_tools=enable_auto,
        parser_cls=parser_cls,
    )
    out = {"raw": raw, "reasoning": fields.reasoning, "content": fields.content,
           "tool_calls": _calls(fields.tool_calls)}
    try:
        out["reasoning_tokens"] = parser.count_reasoning_tokens(list(ids))
    except Exception as exc:
        out["reasoning_tokens_error"] = _err(exc)
    return out


def _family_stream(req, tok, parser_cls, chunks):
    request = _family_request(req)
    parser = _make_parser(req, tok, request, parser_cls)
    if req.get("adjust_request"):
        request = parser.adjust_request(request)
    processor = ChatStreamProcessor(
        request, parser, enable_auto_tools=req.get("enable_auto_tools", True),
        parser_cls=parser_cls,
    )
    reasoning, content, calls, deltas = [], [], {}, []
    finish_reasons = []
    for i, (text, ids) in enumerate(chunks):
        finish = "stop" if i == len(chunks) - 1 else None
        step = processor.step(text, list(ids), finish, req.get("prompt_token_ids"))
        delta, finish_reason = step
        finish_reasons.append(finish_reason)
        if delta is None:
            deltas.append(None)
            continue
        entry = {"reasoning": delta.reasoning, "content": delta.content, "tool_calls": []}
        reasoning.append(delta.reasoning or "")
        content.append(delta.content or "")
        for tc in delta.tool_calls or []:
            fn = tc.function
            name = fn.name if fn is not None else None
            args = fn.arguments if fn is not None else None
            entry["tool_calls"].append(
                {"index": tc.index, "id": tc.id, "name": name, "arguments": args})
            slot = calls.setdefault(tc.index, {"name": "", "arguments": "", "id": None})
            slot["name"] += name or ""
            slot["arguments"] += args or ""
            if tc.id:
                slot["id"] = slot["id"] or tc.id
        deltas.append(entry)
    return {
        "reasoning": "".join(reasoning), "content": "".join(content),
        "tool_calls": [calls[i] for i in sorted(calls)], "deltas": deltas,
        "finish_reason": finish_reasons[-1] if finish_reasons else None,
    }


def op_family(req):
    """One tool parser and/or one reasoning parser over many cases; errors are data.

    Request: tool_parser, reasoning_parser (names or null), tokenizer_dir, loader, tools,
    request (ChatCompletionRequest fields: tool_choice, parallel_tool_calls,
    include_reasoning, ...), chat_template_kwargs, prompt_token_ids, enable_auto_tools
    (default true), adjust_request (default false: call the composed parser's
    adjust_request on the request first, as serving does before generation),
    cases: [{text, chunks: [[text, ids], ...], token_ids (default: the chunks' ids),
    prompt_token_ids, chat_template_kwargs (each overrides the request-level one for this
    case)}]. Note: vLLM's
    DelegatingParser never enters its tool-call phase in a stream whose prompt_token_ids
    are None (state.reasoning_ended is only set from them), so pass a prompt ([] at least).
    Response: {"construct": {"tool"|"reasoning"|"composed": null or error}, "composed_class",
    "results": [{"batch", "tool", "reasoning", "stream", "reasoning_tokens"} per case, each
    replaced by "<key>_error" when vLLM raised]}.
    """
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    tok = tokenizer(req["tokenizer_dir"], req.get("loader", "auto"))
    tool_name, reasoning_name = req.get("tool_parser"), req.get("reasoning_parser")
    kwargs = req.get("chat_template_kwargs") or {}
    construct = {"tool": None, "reasoning": None, "composed": None}
    tool_cls = reasoning_cls = parser_cls = None
    if tool_name:
        try:
            tool_cls = ToolParserManager.get_tool_parser(tool_name)
            tool_cls(tok, _family_request(req).tools)
        except Exception as exc:
            construct["tool"] = _err(exc)
    if reasoning_name:
        try:
            reasoning_cls = ReasoningParserManager.get_reasoning_parser(reasoning_name)
            reasoning_cls(tok, chat_template_kwargs=kwargs)
        except Exception as exc:
            construct["reasoning"] = _err(exc)
    try:
        parser_cls = ParserManager.get_parser(
            tool_parser_name=tool_name, reasoning_parser_name=reasoning_name,
            enable_auto_tools=req.get("enable_auto_tools", True), tokenizer=tok,
        )
        if parser_cls is None:
            raise TypeError("ParserManager.get_parser returned None")
    except Exception as exc:
        construct["composed"] = _err(exc)
        parser_cls = None

    results = []
    for case in req["cases"]:
        text, chunks = case["text"], case.get("chunks") or [[case["text"], []]]
        creq = req  # per-case prompt (the template's generation prompt) overrides
        if "prompt_token_ids" in case:
            creq = {**req, "prompt_token_ids": case["prompt_token_ids"]}
        if "chat_template_kwargs" in case:  # per-case switches (one call for every setting)
            creq = {**creq, "chat_template_kwargs": case["chat_template_kwargs"]}
        ids = case.get("token_ids")
        if ids is None:
            ids = [i for _, chunk_ids in chunks for i in chunk_ids]
        out = {}
        if parser_cls is None:
            out["batch_error"] = out["stream_error"] = "construct: " + construct["composed"]
        else:
            try:
                out["batch"] = _family_batch(creq, tok, parser_cls, text, ids)
            except Exception as exc:
                out["batch_error"] = _err(exc)
            try:
                out["stream"] = _family_stream(creq, tok, parser_cls, chunks)
            except Exception as exc:
                out["stream_error"] = _err(exc)
        if tool_name:
            if construct["tool"]:
                out["tool_error"] = "construct: " + construct["tool"]
            else:
                try:
                    request = _family_request(req)
                    info = tool_cls(tok, request.tools).extract_tool_calls(text, request)
                    out["tool"] = {"tools_called": info.tools_called, "content": info.content,
                                   "tool_calls": _calls(info.tool_calls)}
                except Exception as exc:
                    out["tool_error"] = _err(exc)
        if reasoning_name:
            if construct["reasoning"]:
                out["reasoning_error"] = "construct: " + construct["reasoning"]
            else:
                try:
                    rp = reasoning_cls(tok, chat_template_kwargs=creq.get("chat_template_kwargs") or {})
                    r, c = rp.extract_reasoning(text, _family_request(creq))
                    out["reasoning"] = {"reasoning": r, "content": c}
                    try:
                        out["reasoning_tokens"] = rp.count_reasoning_tokens(list(ids))
                    except Exception as exc:
                        out["reasoning_tokens_error"] = _err(exc)
                except Exception as exc:
                    out["reasoning_error"] = _err(exc)
        results.append(out)
    return {"construct": construct,
            "composed_class": None if parser_cls is None else [c.__name__ for c in parser_cls.__mro__[:3]],
            "results": results}


def op_family_construct(req):
    """For each {tool_parser, reasoning_parser, tokenizer_dir, loader}: None when the tool
    parser, the reasoning parser and ParserManager.get_parser(..., tokenizer=tok) (which
    also instantiates the composed class) all construct, else {which: error}."""
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    out = []
    for item in req["items"]:
        tok = tokenizer(item["tokenizer_dir"], item.get("loader", "auto"))
        errors = {}
        if item.get("tool_parser"):
            try:
                ToolParserManager.get_tool_parser(item["tool_parser"])(tok, None)
            except Exception as exc:
                errors["tool"] = _err(exc)
        if item.get("reasoning_parser"):
            try:
                ReasoningParserManager.get_reasoning_parser(item["reasoning_parser"])(tok)
            except Exception as exc:
                errors["reasoning"] = _err(exc)
        try:
            cls = ParserManager.get_parser(
                tool_parser_name=item.get("tool_parser"),
                reasoning_parser_name=item.get("reasoning_parser"),
                enable_auto_tools=True, tokenizer=tok)
            cls(tok, None, chat_template_kwargs={}, model_config=None)
        except Exception as exc:
            errors["composed"] = _err(exc)
        out.append(errors or None)
    return out


def op_registries(req):
    from vllm.reasoning import ReasoningParserManager
    from vllm.tool_parsers import ToolParserManager

    return {"tool": list(ToolParserManager.list_registered()),
            "reasoning": list(ReasoningParserManager.list_registered())}


def _harmony_pieces(tok, ids):
    """Token-aligned text of `ids` as vLLM's derender decodes it (special tokens kept)."""
    state = _seed_stream_state(tok, None, skip_special_tokens=False)
    pieces = []
    for i in ids:
        text, state = detokenize(tok, [i], state, False)
        pieces.append(text)
    return pieces


def _harmony_message(m):
    from openai_harmony import Author, Message, Role

    msg = Message.from_author_and_content(Author.new(Role(m.get("role", "assistant")), m.get("name")), m["content"])
    if m.get("channel"):
        msg = msg.with_channel(m["channel"])
    if m.get("recipient"):
        msg = msg.with_recipient(m["recipient"])
    if m.get("content_type"):
        msg = msg.with_content_type(m["content_type"])
    return msg


def op_harmony(req):
    """`configs`: [{parser settings, request}] -> one `op_harmony_one` result list each."""
    if "configs" in req:
        base = {k: v for k, v in req.items() if k != "configs"}
        return [op_harmony_one({**base, **config}) for config in req["configs"]]
    return op_harmony_one(req)


def op_harmony_one(req):
    """gpt-oss output through vLLM's HarmonyParser (ParserManager with is_harmony) on many cases.

    Request: tool_parser / reasoning_parser (default openai / openai_gptoss, null for none),
    enable_auto_tools (default true), tokenizer_dir (the parser decodes only on error
    recovery), request (ChatCompletionRequest fields), tools, cases: [{text} (encoded with
    every special token allowed) | {messages: [{role, channel, recipient, content_type,
    content}], end} (assistant messages rendered by openai_harmony as the model writes them,
    the first without its "<|start|>assistant" and the last ending with `end`: "return",
    "call" or "none"), cut (drop this many final tokens)}].
    Response: per case {ids, pieces (token-aligned text), batch {reasoning, content,
    tool_calls}, raw (Parser.parse), stream (ChatStreamProcessor per token) or *_error}.
    """
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding

    enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    tok = tokenizer(req["tokenizer_dir"], req.get("loader", "auto"))
    tool_name = req.get("tool_parser", "openai")
    reasoning_name = req.get("reasoning_parser", "openai_gptoss")
    enable_auto = req.get("enable_auto_tools", True)
    parser_cls = ParserManager.get_parser(
        tool_parser_name=tool_name, reasoning_parser_name=reasoning_name,
        enable_auto_tools=enable_auto, is_harmony=True,
    )
    start = enc.encode("<|start|>assistant", allowed_special="all")
    ends = {"return": enc.encode("<|return|>", allowed_special="all"),
            "call": enc.encode("<|call|>", allowed_special="all"), "none": []}
    results = []
    for case in req["cases"]:
        if "text" in case:
            ids = enc.encode(case["text"], allowed_special="all")
        else:
            ids = []
            for m in case["messages"]:
                ids += enc.render(_harmony_message(m))
            if ids[: len(start)] == start:
                ids = ids[len(start):]
            end = case.get("end", "return")
            if end != "none" and ids and ids[-1] in (enc.encode("<|end|>", allowed_special="all")[0],
                                                     ends["call"][0], ends["return"][0]):
                ids = ids[:-1] + ends[end]
        if case.get("cut"):
            ids = ids[: -case["cut"]]
        out = {"ids": ids, "pieces": _harmony_pieces(tok, ids)}
        req_case = {**req, "request": {**(req.get("request") or {}), **(case.get("request") or {})}}
        if parser_cls is None:
            out["batch"] = None
        else:
            try:
                request = _family_request(req_case)
                parser = parser_cls(tok, request.tools, chat_template_kwargs={}, model_config=None)
                reasoning, content, calls = parser.parse("", request, enable_auto_tools=enable_auto,
                                                         model_output_token_ids=ids)
                out["raw"] = {"reasoning": reasoning, "content": content, "tool_calls": _calls(calls)}
                fields = assemble_chat_message_fields(request, reasoning, content, calls,
                                                      enable_auto_tools=enable_auto, parser_cls=parser_cls)
                out["batch"] = {"reasoning": fields.reasoning, "content": fields.content,
                                "tool_calls": _calls(fields.tool_calls)}
                counter = parser_cls(tok, request.tools, chat_template_kwargs={}, model_config=None)
                out["reasoning_tokens"] = counter.count_reasoning_tokens(ids)
            except Exception as exc:
                out["batch_error"] = _err(exc)
            try:
                chunks = [[p, [i]] for p, i in zip(out["pieces"], ids)] or [["", []]]
                out["stream"] = _family_stream(req_case, tok, parser_cls, chunks)
                out["stream"].pop("deltas", None)
            except Exception as exc:
                out["stream_error"] = _err(exc)
        results.append(out)
    return results


def op_chat_templates(req):
    """Render each case with this venv's transformers (what vLLM 0.33's HF renderer calls,
    `render_jinja_template` under `apply_chat_template(tokenize=False)`): text or error."""
    from transformers.utils.chat_template_utils import render_jinja_template

    out = []
    for case in req["cases"]:
        try:
            rendered, _ = render_jinja_template(
                [case["conversation"]], tools=case.get("tools"), chat_template=case["template"],
                add_generation_prompt=case.get("add_generation_prompt", True), **case.get("kwargs", {}))
            out.append({"text": rendered[0]})
        except Exception as exc:  # a template's refusal is a result
            out.append({"error": _err(exc)})
    return out


OPS = {"chat_templates": op_chat_templates, "harmony": op_harmony, "family": op_family, "family_construct": op_family_construct,
       "registries": op_registries, "tool_traits": op_tool_traits, "detok": op_detok, "parse": op_parse, "stream": op_stream,
       "replay_cpu": op_replay_cpu, "reasoning_tokens": op_reasoning_tokens}


def main() -> None:
    print(json.dumps({"ok": True, "result": "ready"}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            result = OPS[req["op"]](req)
            out = {"ok": True, "result": result}
        except Exception as exc:  # report to the test, which fails on it
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                   "traceback": traceback.format_exc()}
        print(json.dumps(out, ensure_ascii=False), flush=True)


if __name__ == "__main__":
    main()
