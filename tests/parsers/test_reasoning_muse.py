"""Muse Spark reasoning (vLLM's MuseReasoningParser, names `muse` / `musespark1x`): our split
== vLLM 0.33's `extract_reasoning`, our reasoning-token count == its `count_reasoning_tokens`
and our composed batch (with the `muse` tool parser) == its DelegatingParser batch, on the
Muse corpus, hostile variants, the tool side's cases and ours, in one oracle call; streams ==
batch (reasoning alone and composed) under token, whole and random splits with the state
restored at every boundary; the state stays small on long reasoning."""

from __future__ import annotations

import json

import pytest

from parsers._base import ReasoningParser
from parsers.chat import ChatOptions, ChatParser
from parsers.reasoning.muse import PRE_HEADER_CHARS, MuseReasoningParser, MuseSpark1xReasoningParser
from parsers.reasoning_tokens import reasoning_token_counter
from parsers.registry import get_reasoning_parser, get_tool_parser

from .family_check import check_chunking
from .family_oracle import family_cases, vllm_family
from .family_tokenizers import family_tokenizer
from .tokenizers_util import TokenizerBundle
from .tools.engine_family_support import composed_mismatches, family_cases_for, reasoning_mismatches
from .tools.test_tool_muse import LONG_DIVERGENCES, TOOLS, cut_call_kept, invoke, msg
from .tools.test_tool_muse import OWN as TOOL_OWN

R = " to=self<|message|>thinking<|eom|>"
OWN: dict[str, str] = {
    "r:ws_before_header_is_body": " to=self<|message|>think to=user<|message|>ans<|eot|>",
    "r:bare_header_reasons": "<|message|>bare thoughts<|eom|>" + msg("user", "hi", "<|eot|>"),
    "r:start_assistant_newlines": "<|start|>assistant\n\n to=self<|message|>a<|eom|><|start|>assistant\nto=user<|message|>b",
    "r:start_other_role": R + "<|start|>user to=user<|message|>x<|eot|>",
    "r:odd_recipients": " to=se=lf<|message|>x<|eom|> to=user.x<|message|>y<|eom|> to=用户<|message|>z<|eot|>",
    "r:open_reasoning_then_tool": " to=self<|message|>calling to=read<|message|>" + invoke("read", path="p"),
    "r:tool_then_user_framed": R + msg("read", invoke("read", path="a")) + "junk " + msg("user", "done", "<|eot|>")
                               + msg("self", "late") + msg("developer", "dev") + "tail",
    "r:tool_without_atem": R + msg("read", "no markup here") + msg("user", "answer", "<|eot|>"),
    "r:atem_split_over_body": R + msg("read", "x <atem:invo" + "ke name=\"read\"></atem:invoke>"),
    "r:empty": "",
    "r:commentary_before_call": R + msg("commentary", "Reading it. ") + msg("read", invoke("read", path="a")),
    "r:tool_without_atem_before_call": R + msg("read", "plain") + msg("read", invoke("read", path="a")),
    "r:only_markers": "<|eom|><|eot|><|start|>",
    "r:long": " to=self<|message|>" + "思考 " * 400 + "<|eom|>" + msg("user", "ok", "<|eot|>"),
    # Text before the first header is held up to PRE_HEADER_CHARS (parsers/reasoning/muse.py)
    "r:pre_text_at_bound": "y" * (PRE_HEADER_CHARS - 1) + R + msg("user", "ans", "<|eot|>"),
    "r:long_text_no_header": "A plain answer <|eom|> with <| markers. " * 12,
    "r:long_text_before_header": "x" * (PRE_HEADER_CHARS + 1) + R + msg("user", "ans", "<|eot|>"),
}
_EARLY = ("a user / commentary / tool message before the first tool message holding ATEM: "
          "vLLM's batch frames it (it sees the whole output), our stream had sent its body "
          "(a tool one: dropped)")
DIVERGENCES: dict[str, str] = {name: _EARLY for name in (
    "r:commentary_before_call", "r:tool_without_atem_before_call",
)} | {name: "text before the first header longer than PRE_HEADER_CHARS had streamed as content (vLLM "
              "drops it once a header comes)" for name in ("r:long_text_before_header", "own:long_text_before_header")}


def _cases() -> dict[str, dict]:
    return family_cases_for(["muse"], TOOL_OWN | OWN, max_cuts=6)


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("reasoning", "muse")


def test_names_map_to_vllms_class() -> None:
    assert get_reasoning_parser("muse") is MuseReasoningParser
    assert get_reasoning_parser("musespark1x") is MuseSpark1xReasoningParser
    assert issubclass(MuseSpark1xReasoningParser, MuseReasoningParser)


@pytest.mark.vllm
def test_muse_reasoning_matches_vllm(vllm_ref, bundle) -> None:  # noqa: ANN001
    cases = _cases()
    ready = family_cases(bundle, list(cases.values()))
    out = vllm_family(vllm_ref, tool="muse", reasoning="muse", bundle=bundle, tools=TOOLS, cases=ready)
    assert not out.infra_errors(), out.infra_errors()
    results = dict(zip(cases, out.results, strict=True))
    parser = MuseReasoningParser(bundle.tokenizer)
    bad = reasoning_mismatches(parser, cases, results, bundle, DIVERGENCES)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:6000]
    assert_counts_and_composed(parser, "muse", cases, ready, results, bundle, COMPOSED_DIVERGENCES)


def assert_counts_and_composed(parser: ReasoningParser, tool_name: str, cases: dict, ready: list,  # noqa: PLR0913
                               results: dict, bundle: TokenizerBundle, named: dict[str, str]) -> None:
    """Our reasoning-token count == vLLM's, and our composed batch (with the Muse tool parser
    `tool_name`) == vLLM's but for the `named` cases and the tool side's named divergences
    (test_tool_muse.py), seen through the composition: without a call vLLM keeps the reasoning
    parser's (framed) content raw where ours returns the tool parser's content of it; a call
    the output cuts is kept."""
    counter = reasoning_token_counter(parser)
    counts = {name: (counter.count([i for _, ids in case["chunks"] for i in ids]), res.get("reasoning_tokens"))
              for (name, res), case in zip(results.items(), ready, strict=True)}
    assert {k: v for k, v in counts.items() if v[0] != v[1]} == {}
    tool = get_tool_parser(tool_name)(bundle.tokenizer, TOOLS)
    chat = ChatParser(parser, tool, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    composed = composed_mismatches(chat, cases, results, bundle)
    for name, diff in list(composed.items()):
        ours, theirs = diff["ours"], diff["vllm"]
        framed = results[name]["reasoning"]["content"]
        again = tool.parse(framed or "", "req-1")
        raw_without_calls = not theirs[2] and theirs[1] == framed and ours[1] == again.content and len(ours[2]) <= 1
        if ours[0] == theirs[0] and (raw_without_calls or cut_call_kept((ours[1], ours[2]), (theirs[1], theirs[2]))):
            del composed[name]
    for name in named:
        assert composed.pop(name, None) is not None, f"{name}: named divergence does not diverge"
    assert not composed, json.dumps(composed, ensure_ascii=False)[:6000]


# Composed, our reasoning parser hands the tool parser its framed text (MuseReasoningParser
# .for_tool_parser), so it streams the answer and keeps content sent before a call; vLLM's
# batch hands it bare bodies when no tool message holds ATEM, hence:
_ECHO = ("ATEM inside a to=user / to=commentary answer stays content; vLLM's reasoning parser "
         "strips the framing first, so its tool parser makes it a real call")
COMPOSED_DIVERGENCES: dict[str, str] = {
    "own:invoke_in_user_answer": _ECHO,
    "own:glimmer_recipients": _ECHO,
    "own:header_ws_and_goto": "whitespace before a `to=` header: vLLM's reasoning split keeps it "
                              "in the body, the tool parser's split of our framed text drops it",
    **LONG_DIVERGENCES,  # the tool side's, through the composition
    "r:long_text_before_header": LONG_DIVERGENCES["own:long_text_before_header"],
}


@pytest.mark.parametrize("composed", [False, True])
def test_muse_reasoning_stream_equals_batch(bundle, composed: bool) -> None:  # noqa: ANN001
    parser = MuseReasoningParser(bundle.tokenizer)
    tool = get_tool_parser("muse")(bundle.tokenizer, TOOLS) if composed else None
    chat = ChatParser(parser, tool, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    texts = [*TOOL_OWN.values(), *OWN.values()]
    if not composed:  # the corpus and its hostile variants too (composed: the tool test has them)
        texts += [c["text"] for c in family_cases_for(["muse"], {}, max_cuts=3).values()
                  if "\ufffd" not in c["text"]]  # (no tokenizer round trip)
    for text in texts:
        check_chunking(chat, bundle, text, n_random=2)


def test_muse_reasoning_end_on_prompt(bundle) -> None:  # noqa: ANN001
    parser = MuseReasoningParser(bundle.tokenizer)
    turn = "<|start|>user<|message|>hi<|eot|><|start|>assistant"
    assert not parser.is_reasoning_end(bundle.encode(turn + R))
    assert parser.is_reasoning_end(bundle.encode(turn + R + msg("read", invoke("read", path="a"))))
    # an earlier turn's call, or one echoed in reasoning, does not end it
    assert not parser.is_reasoning_end(bundle.encode(msg("read", invoke("read", path="a")) + turn))
    assert not parser.is_reasoning_end(bundle.encode(turn + " to=self<|message|>" + invoke("read", path="a")))


def test_muse_reasoning_state_stays_small() -> None:
    parser = MuseReasoningParser(None)
    text = R + msg("self", "r" * 20000) + msg("user", "c" * 5000, "<|eot|>")
    state, biggest, reasoning = parser.initial_state(), 0, 0
    for i in range(0, len(text), 7):
        state, events = parser.feed(state, text[i : i + 7])
        reasoning += sum(len(e.text) for e in events if type(e).__name__ == "ReasoningDelta")
        biggest = max(biggest, len(json.dumps(state.to_json())))
    assert biggest < 300, biggest
    assert reasoning == len("thinking") + 20000


@pytest.mark.parametrize("header", ["", R + msg("user", "ans", "<|eot|>")])
def test_muse_reasoning_state_small_before_the_first_header(bundle, header: str) -> None:  # noqa: ANN001
    assert_pre_header_not_held(MuseReasoningParser(bundle.tokenizer), bundle, header)


def assert_pre_header_not_held(parser: ReasoningParser, bundle: TokenizerBundle, header: str) -> None:
    """~20k characters before any header, one token per chunk with the state round-tripped:
    they are never held (the largest state stays under 2 KB), and stream as content."""
    pre = "Some text before any header, <|eom|> to= t <| and on. " * 380
    text = pre + header
    assert len(pre) > 20000
    state, biggest, content = parser.initial_state(), 0, []
    for piece in bundle.pieces(text):
        state, events = parser.feed(state, piece)
        state = type(state).from_json(json.loads(json.dumps(state.to_json())))
        content += [e.text for e in events if type(e).__name__ == "ContentDelta"]
        biggest = max(biggest, len(json.dumps(state.to_json())))
    state, events = parser.finish(state)
    content += [e.text for e in events if type(e).__name__ == "ContentDelta"]
    assert biggest < 2048, biggest
    assert "".join(content) == parser.parse(text).content == pre + (" ans" if header else "")  # (the space before to=)
