"""Run with the vLLM 0.33 reference python: which vocabulary strings each registered parser
asks for when it is constructed (developer tool behind family_tokenizers.FAMILY_TOKENS).

    $RS_VLLM_REF_VENV/bin/python tests/parsers/family_outputs/probe_markers.py QWEN3_DIR > out.json

Each tool, reasoning and composed parser is constructed over the Qwen3 tokenizer whose
`get_vocab()` is a recording dict: every key looked up (`get`, `[]`, `in`) is noted, and a
missing key gets a fresh fake id so construction can go on to the next lookup. Engine-based
parsers also report their ParserEngineConfig's token_id_terminals / turn boundaries /
preserve_tokens / terminals. The output is a hint for a human, not test data.
"""

import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "CRITICAL")

from transformers import AutoTokenizer  # noqa: E402
from vllm.parser import ParserManager  # noqa: E402
from vllm.parser.engine.parser_engine_config import ParserEngineConfig  # noqa: E402
from vllm.reasoning import ReasoningParserManager  # noqa: E402
from vllm.tokenizers.hf import get_cached_tokenizer  # noqa: E402
from vllm.tool_parsers import ToolParserManager  # noqa: E402


class RecDict(dict):
    def __init__(self, base, log, fake):
        super().__init__(base)
        self.log, self.fake = log, fake

    def _note(self, key):
        if isinstance(key, str):
            self.log.setdefault(key, dict.__contains__(self, key))

    def get(self, key, default=None):
        self._note(key)
        if not dict.__contains__(self, key) and isinstance(key, str) and self.fake is not None:
            return self.fake.setdefault(key, 10_000_000 + len(self.fake))
        return dict.get(self, key, default)

    def __getitem__(self, key):
        self._note(key)
        if not dict.__contains__(self, key) and isinstance(key, str) and self.fake is not None:
            return self.fake.setdefault(key, 10_000_000 + len(self.fake))
        return dict.__getitem__(self, key)

    def __contains__(self, key):
        self._note(key)
        return dict.__contains__(self, key) or (self.fake is not None and isinstance(key, str))


def recording(directory, log, fake):
    tok = get_cached_tokenizer(AutoTokenizer.from_pretrained(directory))
    base = tok.get_vocab()
    rec = RecDict(base, log, fake)
    cls = tok.__class__
    tok.__class__ = type("Rec" + cls.__name__, (cls,), {
        "get_vocab": lambda self: rec,
        "vocab": property(lambda self: rec),
        "convert_tokens_to_ids": lambda self, t: (
            [rec[x] for x in t] if isinstance(t, list) else rec[t]),
    })
    return tok


def configs(obj, seen=None, depth=0):
    seen = seen if seen is not None else set()
    out = []
    if id(obj) in seen or depth > 3:
        return out
    seen.add(id(obj))
    for value in list(getattr(obj, "__dict__", {}).values()):
        if isinstance(value, ParserEngineConfig):
            out.append(value)
        elif hasattr(value, "__dict__") and type(value).__module__.startswith("vllm"):
            out += configs(value, seen, depth + 1)
    return out


def describe(cfg):
    terms = {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.terminals.items()
             if isinstance(v, (str, tuple))}
    return {"name": cfg.name, "token_id_terminals": dict(cfg.token_id_terminals),
            "turn_boundary_tokens": sorted(cfg.turn_boundary_tokens),
            "preserve_tokens": sorted(cfg.preserve_tokens), "terminals": terms}


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def build(kind, name, tok):
    if kind == "tool":
        return ToolParserManager.get_tool_parser(name)(tok, None)
    if kind == "reasoning":
        return ReasoningParserManager.get_reasoning_parser(name)(tok)
    args = {"tool_parser_name": name} if kind == "composed_tool" else {"reasoning_parser_name": name}
    cls = ParserManager.get_parser(enable_auto_tools=True, **args)
    return cls(tok, None, chat_template_kwargs={}, model_config=None)


def probe(directory, kind, name):
    log, fake = {}, {}
    out = {}
    try:
        obj = build(kind, name, recording(directory, log, fake))
        out["configs"] = [describe(c) for c in configs(obj)]
    except Exception as exc:
        out["fake_error"] = f"{type(exc).__name__}: {exc}"
    out["lookups"] = log
    try:
        build(kind, name, recording(directory, {}, None))
        out["qwen3_error"] = None
    except Exception as exc:
        out["qwen3_error"] = f"{type(exc).__name__}: {exc}"
    return out


def main():
    directory = sys.argv[1]
    result = {}
    for name in ToolParserManager.list_registered():
        for kind in ("tool", "composed_tool"):
            result[f"{kind}:{name}"] = probe(directory, kind, name)
    for name in ReasoningParserManager.list_registered():
        for kind in ("reasoning", "composed_reasoning"):
            result[f"{kind}:{name}"] = probe(directory, kind, name)
    json.dump(result, sys.stdout, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
