"""Differential: `parsers.reasoning_tokens` against vLLM 0.33's own `count_reasoning_tokens`.

The session's reference process (op reasoning_tokens, tests/parsers/reasoning_tokens_ref.py) answers every case with
vLLM's parser objects on the same real tokenizers: the non-streamed count, and the streamed
counts after each step (continuous_usage_stats reads it every step) with the whole output fed
one token at a time and in one step, the step texts coming from vLLM serve's detokenizer.
Ours must give the same numbers from the same ids (and, for the live regime, the same step
texts), with the fold state serialised and restored between steps. The gateway's
`ServeDeltaText` must reproduce those step texts from the ids alone.

A missing reference venv fails (never skips) these tests.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from parsers.reasoning_tokens import ReasoningCount, reasoning_token_counter
from render_service.gateway.reasoning_usage import ServeDeltaText

from .families import build
from .tokenizers_util import TokenizerBundle, deepseek_r1, glm_like, mistral_like, qwen3
from .vllm_ref import VllmRef

pytestmark = pytest.mark.vllm

Part = str | int | list[int]


@dataclass
class Case:
    case_id: str
    family: str
    bundle: TokenizerBundle
    loader: str
    ids: list[int]
    prompt_ids: list[int]
    kwargs: dict[str, Any] = field(default_factory=dict)
    skip_special_tokens: bool = False
    stop: list[str] = field(default_factory=list)
    tool_parser: str | None = None
    chunks: list[int] | None = None  # also stream in these steps (token counts)

    def ref_payload(self) -> dict[str, Any]:
        return {"tokenizer_dir": str(self.bundle.directory), "loader": self.loader,
                "reasoning_parser": self.family, "tool_parser": self.tool_parser,
                "kwargs": self.kwargs, "ids": self.ids, "prompt_ids": self.prompt_ids,
                "skip_special_tokens": self.skip_special_tokens, "stop": self.stop,
                "eos_ids": [_eos(self.bundle)], "chunks": self.chunks}


def _eos(bundle: TokenizerBundle) -> int:
    for token in ("<|im_end|>", "<｜end▁of▁sentence｜>"):
        token_id = bundle.tokenizer.token_to_id(token)
        if token_id is not None:
            return token_id
    raise AssertionError(f"no EOS for {bundle.name}")


def _ids(bundle: TokenizerBundle, *parts: Part) -> list[int]:
    """Text parts are encoded (markers become their single tokens); ints/lists are ids."""
    out: list[int] = []
    for part in parts:
        if isinstance(part, str):
            out += bundle.encode(part)
        elif isinstance(part, int):
            out.append(part)
        else:
            out += part
    return out


def _spelled(bundle: TokenizerBundle, *pieces: str) -> list[int]:
    """A marker spelled by ordinary tokens (each piece encoded alone), not its single token."""
    return [i for piece in pieces for i in bundle.encode(piece)]


# -- cases ----------------------------------------------------------------------------------
def _think_texts(start: str, end: str, tool_open: str, tool_close: str
                 ) -> list[tuple[str, tuple[Part, ...], bool]]:
    """(case id, parts, ends with EOS) shared by the <think>-style families."""
    return [
        ("thinking", (f"{start}\nLet me think.\n{end}\n\nParis.",), True),
        ("no_start", (f"Let me think.{end}Answer",), True),
        ("nested", (f"{start}a{start}b{end}c{end}d",), True),
        ("stray_end", (f"{end}a{end}b{start}c",), True),
        ("truncated", (f"{start}reasoning cut short at <thi",), False),
        ("no_markers", ("Just an answer.",), True),
        ("tool_implicit_end", (f'plan{tool_open}\n{{"name": "f", "arguments": {{}}}}\n{tool_close}',),
         True),
        ("think_after_tool", (f"a{end}b{tool_open}\n{{}}\n{tool_close}c{start}d{end}e",), True),
        ("reopened", (f"a{end}b{start}c{end}d",), True),
        ("multibyte", (f"思考 ꙮ 𝒳 🦜🫠 done{end}答案",), True),
        ("marker_prefixes", (f"a <thin b <tool_ c </ d <|im x{end}y <",), False),
        ("special_mid", (f"a<|im_end|>b<|endoftext|>c{end}d",), True),
        ("empty", (), True),
    ]


def _qwen_like_cases(family: str, bundle: TokenizerBundle, open_prompt: str,
                     closed_prompt: str) -> list[Case]:
    open_ids, closed_ids = bundle.encode(open_prompt), bundle.encode(closed_prompt)
    eos = _eos(bundle)
    cases = []
    for case_id, parts, with_eos in _think_texts("<think>", "</think>", "<tool_call>",
                                                 "</tool_call>"):
        ids = _ids(bundle, *parts, *([eos] if with_eos else []))
        cases.append(Case(f"{family}-{case_id}", family, bundle, "auto", ids, open_ids))
        cases.append(Case(f"{family}-{case_id}-closed_prompt", family, bundle, "auto", ids,
                          closed_ids))
        cases.append(Case(f"{family}-{case_id}-thinking_off", family, bundle, "auto", ids,
                          closed_ids, kwargs={"enable_thinking": False}))
    spelled = _ids(bundle, "a", _spelled(bundle, "</", "think", ">"), "b</think>c", eos)
    cases.append(Case(f"{family}-spelled_end", family, bundle, "auto", spelled, open_ids))
    for case_id in ("thinking", "multibyte"):
        base = next(c for c in cases if c.case_id == f"{family}-{case_id}")
        cases.append(Case(f"{base.case_id}-stop_strings", family, bundle, "auto", base.ids,
                          open_ids, stop=["@@@@@", "##"]))
    return cases


def _cases() -> list[Case]:
    q, glm, mis, ds = qwen3(), glm_like(), mistral_like(), deepseek_r1()
    cases = _qwen_like_cases("qwen3", q, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                             "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
                             "<think>\n\n</think>\n\n")
    tool_case = next(c for c in cases if c.case_id == "qwen3-tool_implicit_end")
    cases.append(Case("qwen3-tool_implicit_end-hermes", "qwen3", q, "auto", tool_case.ids,
                      tool_case.prompt_ids, tool_parser="hermes"))
    cases += _qwen_like_cases("glm45", glm, "<|user|>\nhi<|assistant|>",
                              "<|user|>\nhi<|assistant|></think>")
    mis_eos = _eos(mis)
    mis_open, mis_ended = mis.encode("[INST]hi[/INST]"), mis.encode("[INST]hi[/INST][THINK]x[/THINK]")
    for case_id, text in [
        ("thinking", "[THINK]Let me think.\n[/THINK]Answer"),
        ("no_think", "Just an answer."),
        ("content_then_think", "pre[THINK]a b[/THINK]post"),
        ("tool_ends_reasoning", "[THINK]a b[TOOL_CALLS]f[ARGS]{}"),
        ("stray_and_reopen", "x[/THINK]y[THINK]z[/THINK]w[THINK]v"),
        ("multibyte", "[THINK]中文 ꙮ 𝒳[/THINK]x"),
        ("truncated", "[THINK]cut at [TH"),
    ]:
        ids = _ids(mis, text, mis_eos)
        cases.append(Case(f"mistral-{case_id}", "mistral", mis, "auto", ids, mis_open))
        cases.append(Case(f"mistral-{case_id}-ended_prompt", "mistral", mis, "auto", ids,
                          mis_ended))
    ds_eos, ds_prompt = _eos(ds), ds.encode("<｜User｜>hi<｜Assistant｜><think>\n")
    for case_id, text in [("thinking", "<think>a b</think>c"), ("no_start", "a b</think>c"),
                          ("nested", "<think>a<think>b</think>c</think>d"),
                          ("stray", "</think>a<think>b"), ("multibyte", "<think>中文 ꙮ</think>x")]:
        ids = _ids(ds, text, ds_eos)
        for family, kwargs in [("deepseek_r1", {}), ("deepseek_v3", {"thinking": True}),
                               ("deepseek_v3", {})]:
            suffix = "-thinking" if kwargs else ""
            cases.append(Case(f"{family}-{case_id}{suffix}", family, ds, "backend", ids, ds_prompt,
                              kwargs=kwargs, skip_special_tokens=True))
    granite_ids = _ids(q, "Here is my thought process: x<think>y</think>", _eos(q))
    cases.append(Case("granite", "granite", q, "auto", granite_ids, [], skip_special_tokens=True))
    return cases + _random_cases(q, glm, mis)


# Pieces random outputs are made of: markers, specials, prefixes of markers, split characters.
_RANDOM_TEXTS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>",
                 "<|endoftext|>", " plain words", "\n", "思考", "ꙮ", "𝒳", "🦜", " <", "<thi",
                 "</", "<tool", "<|im", ">", "a", " b", "{\"x\": 1}", "<function=f>"]
_MISTRAL_TEXTS = ["[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]", "[TH", "[/", "[", " words",
                  "中文", "ꙮ", "{", "}", "x"]


def _random_cases(q: TokenizerBundle, glm: TokenizerBundle, mis: TokenizerBundle) -> list[Case]:
    """Seeded random outputs, each streamed in random steps, some with stop strings."""
    rng = random.Random(20240607)
    cases = []
    prompts = {"qwen3": q.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
               "glm45": glm.encode("<|user|>\nhi<|assistant|>"), "mistral": mis.encode("hi")}
    # Prompts that already ended reasoning: the stream then runs the token-level count.
    ended = {"qwen3": prompts["qwen3"] + q.encode("<think>\n\n</think>\n\n"),
             "glm45": prompts["glm45"] + glm.encode("</think>"),
             "mistral": prompts["mistral"] + mis.encode("[THINK]x[/THINK]")}
    for family, bundle, texts in (("qwen3", q, _RANDOM_TEXTS), ("glm45", glm, _RANDOM_TEXTS),
                                  ("mistral", mis, _MISTRAL_TEXTS)):
        for n in range(12):
            ids = _ids(bundle, *(rng.choice(texts) for _ in range(rng.randint(1, 14))))
            if rng.random() < 0.7:
                ids.append(_eos(bundle))
            cuts = sorted(rng.sample(range(1, len(ids)), rng.randint(0, len(ids) - 1))) \
                if len(ids) > 1 else []
            chunks = [b - a for a, b in zip([0, *cuts], [*cuts, len(ids)])]
            stop = rng.choice([[], [], ["@@@"], ["zz", "@@@@@@"]])
            tool = "hermes" if family == "qwen3" and n % 3 == 0 else None
            prompt = ended[family] if n % 4 == 3 else prompts[family]
            cases.append(Case(f"{family}-random{n}", family, bundle, "auto", ids, prompt,
                              stop=stop, tool_parser=tool, chunks=chunks))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def vllm_counts(vllm_ref: VllmRef) -> dict[str, Any]:
    results = vllm_ref.call("reasoning_tokens", cases=[c.ref_payload() for c in CASES])
    return {c.case_id: r for c, r in zip(CASES, results, strict=True)}


def _counter(case: Case):
    return reasoning_token_counter(build(case.family, case.kwargs))


def _stream(case: Case, chunks: list[int], texts: list[str]) -> list[int]:
    counter = _counter(case)
    state = counter.start(case.prompt_ids, streaming=True)
    counts, start = [], 0
    for k, (n, text) in enumerate(zip(chunks, texts, strict=True)):
        state = ReasoningCount.from_json(json.loads(json.dumps(state.to_json())))
        state = counter.fold(state, case.ids[start:start + n], text if counter.needs_text(state)
                             else "")
        start += n
        if k == len(chunks) - 1:
            state = counter.finish(state)
        counts.append(state.count)
    return counts


@pytest.mark.parametrize("case", CASES, ids=[c.case_id for c in CASES])
def test_counts_equal_vllm(case: Case, vllm_counts: dict[str, Any]) -> None:
    theirs = vllm_counts[case.case_id]
    counter = _counter(case)
    assert counter.count(case.ids, case.prompt_ids) == theirs["batch"], "non-streamed count"
    one_by_one = theirs["one_by_one"]
    assert _stream(case, [1] * len(case.ids), one_by_one["texts"]) == one_by_one["counts"], (
        "streamed one token at a time (count after each step)")
    whole = theirs["whole"]
    assert _stream(case, [len(case.ids)], whole["texts"]) == whole["counts"], (
        "streamed in one step")
    if case.chunks:
        chunked = theirs["chunked"]
        assert _stream(case, case.chunks, chunked["texts"]) == chunked["counts"], (
            f"streamed in steps {case.chunks}")


@pytest.mark.parametrize("case", CASES, ids=[c.case_id for c in CASES])
def test_serve_step_texts_equal_vllm_serve_detokenizer(case: Case,
                                                       vllm_counts: dict[str, Any]) -> None:
    """The gateway rebuilds each step's text as vLLM serve's output processor emits it."""
    from parsers.detokenizer import IncrementalDetokenizer

    modes = [("one_by_one", [1] * len(case.ids)), ("whole", [len(case.ids)])]
    if case.chunks:
        modes.append(("chunked", case.chunks))
    for mode, chunks in modes:
        detok = IncrementalDetokenizer(case.bundle.tokenizer, case.bundle.special_ids,
                                       skip_special_tokens=case.skip_special_tokens)
        text = ServeDeltaText(detok, case.prompt_ids, case.stop, include_stop=False)
        ours, start = [], 0
        eos = _eos(case.bundle)
        for k, n in enumerate(chunks):
            step = case.ids[start:start + n]
            start += n
            last = k == len(chunks) - 1
            ours.append(text.step(step, finished=last,
                                  stop_terminated=last and bool(step) and step[-1] == eos))
        assert ours == vllm_counts[case.case_id][mode]["texts"], mode


def test_vllm_streamed_count_differs_from_its_batch_count_on_split_characters(
        vllm_counts: dict[str, Any]) -> None:
    """Named vLLM behaviour (reproduced above, not a divergence): a step whose text is empty
    (a character split over tokens, or text held back for stop strings) adds nothing to the
    parser engine's streamed count, so it is below the non-streamed one."""
    for case_id in ("qwen3-multibyte", "qwen3-thinking-stop_strings", "glm45-multibyte"):
        theirs = vllm_counts[case_id]
        assert theirs["one_by_one"]["counts"][-1] < theirs["batch"], case_id
    for case_id in ("qwen3-thinking", "deepseek_r1-multibyte"):
        theirs = vllm_counts[case_id]
        assert theirs["one_by_one"]["counts"][-1] == theirs["batch"], case_id


def test_state_rejects_garbage() -> None:
    from parsers import StateError

    good = ReasoningCount(count=2, held="<th", held_offsets=(0, 2)).to_json()
    assert ReasoningCount.from_json(good).count == 2
    for bad in ({**good, "count": -1}, {**good, "held_offsets": [3]}, {**good, "phase": "x"},
                {**good, "v": 2}, {**good, "extra": 1}):
        with pytest.raises(StateError):
            ReasoningCount.from_json(bad)


@pytest.mark.parametrize("alias,base", [("glm47", "glm45"), ("ling3", "glm45"), ("mimo", "qwen3")])
def test_alias_families_count_as_their_base(alias: str, base: str) -> None:
    """glm47 / ling3 run vLLM's GLM-4.7 engine config and mimo Qwen3's: the counts (token
    level and live) equal the base family's, which is checked against vLLM above."""
    from parsers.registry import get_reasoning_parser

    for case in (c for c in CASES if c.family == base):
        ours = reasoning_token_counter(get_reasoning_parser(alias)(
            case.bundle.tokenizer, case.kwargs if case.kwargs is not None else {},
            special_tokens=case.bundle.special_tokens))
        theirs = _counter(case)
        assert ours.count(case.ids, case.prompt_ids) == theirs.count(case.ids, case.prompt_ids), case.case_id
        for streaming in (False, True):
            a, b = ours.start(case.prompt_ids, streaming=streaming), theirs.start(case.prompt_ids, streaming=streaming)
            text = case.bundle.tokenizer.decode(case.ids, skip_special_tokens=False)
            a = ours.finish(ours.fold(a, case.ids, text))
            b = theirs.finish(theirs.fold(b, case.ids, text))
            assert a.count == b.count, (case.case_id, streaming)
