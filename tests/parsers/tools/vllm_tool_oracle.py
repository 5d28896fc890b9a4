"""Run by the vLLM 0.33 reference python: vLLM's own tool parsers as an oracle.

Protocol: one JSON request per stdin line, one JSON response per stdout line.
Request: {"parser": name, "vocab": {token: id}, "tokenizer_file": path|null,
          "tools": [openai tool], "cases": [{"text": str, "chunks": [[text, [ids]], ...]}]}
Response: {"results": [{"batch": {...}, "stream": {...}}, ...]} or {"error": str}
Batch is `ToolParser.extract_tool_calls`; stream is the composed `Parser.parse_delta` (tool
parser only, as the serving layer drives it), chunk by chunk, `finished` on the last chunk.
"""

import json
import os
import sys
import traceback

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "CRITICAL")

from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest  # noqa: E402
from vllm.parser.parser_manager import ParserManager  # noqa: E402
from vllm.tool_parsers import ToolParserManager  # noqa: E402


class StubTokenizer:
    """Only the vocabulary: what the legacy tool parsers read from a tokenizer."""

    def __init__(self, vocab):
        self._vocab = dict(vocab)

    def get_vocab(self):
        return self._vocab

    def __len__(self):
        return len(self._vocab)


_TOKENIZERS = {}


def tokenizer_for(req):
    path = req.get("tokenizer_file")
    if not path:
        return StubTokenizer(req.get("vocab") or {})
    if path not in _TOKENIZERS:
        from vllm.tokenizers import get_tokenizer

        _TOKENIZERS[path] = get_tokenizer(os.path.dirname(path))
    return _TOKENIZERS[path]


def request_for(tools):
    return ChatCompletionRequest(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        tools=tools,
        tool_choice="auto",
    )


def batch(tool_cls, tok, tools, text):
    parser = tool_cls(tok, request_for(tools).tools)
    info = parser.extract_tool_calls(text, request_for(tools))
    return {
        "tools_called": info.tools_called,
        "content": info.content,
        "calls": [[c.function.name, c.function.arguments, c.id] for c in info.tool_calls],
    }


def stream(parser_cls, tok, tools, chunks):
    req = request_for(tools)
    parser = parser_cls(tok, req.tools)
    content, calls = [], {}
    for i, (text, ids) in enumerate(chunks):
        delta = parser.parse_delta(
            text, list(ids), req, prompt_token_ids=[], finished=i == len(chunks) - 1
        )
        if delta is None:
            continue
        if delta.content:
            content.append(delta.content)
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"name": None, "args": "", "id": None})
            if tc.id:
                slot["id"] = tc.id
            if tc.function is not None:
                if tc.function.name:
                    slot["name"] = (slot["name"] or "") + tc.function.name
                if tc.function.arguments:
                    slot["args"] += tc.function.arguments
    return {
        "content": "".join(content) or None,
        "calls": [[calls[i]["name"], calls[i]["args"], calls[i]["id"]] for i in sorted(calls)],
    }


def handle(req):
    tok = tokenizer_for(req)
    name = req["parser"]
    tool_cls = ToolParserManager.get_tool_parser(name)
    parser_cls = ParserManager.get_parser(tool_parser_name=name, enable_auto_tools=True)
    results = []
    for case in req["cases"]:
        out = {}
        try:
            out["batch"] = batch(tool_cls, tok, req["tools"], case["text"])
        except Exception:  # report, the test decides
            out["batch_error"] = traceback.format_exc(limit=3)
        try:
            out["stream"] = stream(parser_cls, tok, req["tools"], case["chunks"])
        except Exception:
            out["stream_error"] = traceback.format_exc(limit=3)
        results.append(out)
    return {"results": results}


def main():
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            resp = handle(json.loads(line))
        except Exception:
            resp = {"error": traceback.format_exc()}
        print(json.dumps(resp), flush=True)


if __name__ == "__main__":
    main()
