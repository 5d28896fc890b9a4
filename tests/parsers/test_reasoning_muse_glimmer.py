"""Muse Glimmer reasoning (vLLM's MuseGlimmerReasoningParser, name `muse_glimmer`): our split
== vLLM 0.33's `extract_reasoning` and our reasoning-token count (0) == its
`count_reasoning_tokens` and our composed batch (with the `muse_glimmer` tool parser) == its
DelegatingParser batch, on the Muse corpus, hostile variants, the tool side's cases and ours,
in one oracle call; streams == batch (reasoning alone and composed) under token, whole and
random splits with the state restored at every boundary; the state stays small on long
reasoning."""

from __future__ import annotations

import json

import pytest

from parsers.chat import ChatOptions, ChatParser
from parsers.reasoning.muse import PRE_HEADER_CHARS
from parsers.reasoning.muse_glimmer import MuseGlimmerReasoningParser
from parsers.registry import get_reasoning_parser, get_tool_parser

from .family_check import check_chunking
from .family_oracle import family_cases, vllm_family
from .family_tokenizers import family_tokenizer
from .test_reasoning_muse import assert_counts_and_composed, assert_pre_header_not_held
from .tools.engine_family_support import family_cases_for, reasoning_mismatches
from .tools.test_tool_muse import LONG_DIVERGENCES, TOOLS, invoke, msg
from .tools.test_tool_muse import OWN as TOOL_OWN

S = "to=self<|message|>"
R = " " + S + "thinking<|eom|>"
OWN: dict[str, str] = {
    "g:two_self_gap": S + "A<|eom|>junk " + S + "B<|eom|>" + msg("user", "U", "<|eot|>"),
    "g:user_eom_then_self": S[:0] + msg("user", "U") + S + "B<|eom|>",
    "g:self_eot_inside": S + "A<|eot|>" + msg("user", "U", "<|eot|>"),
    "g:no_headers": "plain <|eom|> text",
    "g:tool_no_atem": msg("read", "x"),
    "g:tool_no_atem_then_user": msg("read", "x") + msg("user", "U", "<|eot|>"),
    "g:two_users": R + msg("user", "U1") + msg("user", "U2", "<|eot|>"),
    "g:pre_text_user": "hello " + msg("user", "U", "<|eot|>"),
    "g:open_only": S + "thinking",
    "g:user_atem": R + msg("user", "see " + invoke("read", path="a"), "<|eot|>"),
    "g:start_assistant_strip": "<|start|>assistant\n " + S + "A<|eom|><|start|>assistant to=read<|message|>"
                               + invoke("read", path="p"),
    "g:self_user_truncated": R + "<|start|>assistant to=user<|message|>partial answ",
    "g:empty_self": S + "<|eom|>" + msg("user", "U", "<|eot|>"),
    "g:selfish_recipient": " to=selfx<|message|>x<|eom|>" + msg("user", "U", "<|eot|>"),
    "g:long": " " + S + "思考 " * 400 + "<|eom|>" + msg("user", "ok", "<|eot|>"),
    # Text before the first header is held up to PRE_HEADER_CHARS (parsers/reasoning/muse.py)
    "g:pre_text_at_bound": "y" * PRE_HEADER_CHARS + "to=user<|message|>U<|eot|>",  # (Glimmer's header)
    "g:long_text_no_header": "A plain answer <|eom|> with <| markers. " * 12,
    "g:long_text_then_call": "z " * 200 + msg("read", invoke("read", path="a")),
    "g:long_text_before_user": "x" * (PRE_HEADER_CHARS + 1) + msg("user", "U", "<|eot|>"),
    "g:long_text_before_self": "x" * (PRE_HEADER_CHARS + 1) + R,
    # vLLM's losses and doubles (DIVERGENCES)
    "g:closed_then_open": S + "A<|eom|>" + S + "B",
    "g:self_into_tool": S + "A to=read<|message|>" + invoke("read", path="p") + "<|eom|>",
    "g:tool_then_self_truncated": msg("user", "U") + S + "B",
    "g:user_then_call": R + msg("user", "U") + "<|start|>assistant to=read<|message|>" + invoke("read", path="a"),
}
_EARLY = ("content sent before the remainder shows ATEM (a to=user answer, or ATEM in it): vLLM's "
          "batch makes content the whole remainder, framing included; ours keeps what it sent")
DIVERGENCES: dict[str, str] = {
    "g:closed_then_open": "a closed self span, then one that never closes: vLLM's gap collapse joins "
                          "them and its closed-span match finds no <|eom|>, so the closed text is lost",
    "g:self_into_tool": "a self span that runs into a header and later closes: vLLM's closed match "
                        "spans the header (the call becomes reasoning, then the open part again)",
    "g:tool_then_self_truncated": "a self header after another message's <|eom|>: vLLM's collapse "
                                  "swallows it, its body is reasoning only if it never closes",
    "g:empty_self": "an empty closed self span: vLLM's reasoning is '', ours None (no empty delta)",
    "g:user_atem": _EARLY, "own:invoke_in_user_answer": _EARLY, "g:user_then_call": _EARLY,
    **{name: "text before the first header longer than PRE_HEADER_CHARS had streamed as content "
             "(vLLM drops it once a user or self header comes)"
       for name in ("g:long_text_before_user", "g:long_text_before_self", "own:long_text_before_header")},
}


def _cases() -> dict[str, dict]:
    return family_cases_for(["muse_glimmer"], TOOL_OWN | OWN, max_cuts=6)


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("reasoning", "muse_glimmer")


def test_name_maps_to_vllms_class() -> None:
    assert get_reasoning_parser("muse_glimmer") is MuseGlimmerReasoningParser


@pytest.mark.vllm
def test_muse_glimmer_reasoning_matches_vllm(vllm_ref, bundle) -> None:  # noqa: ANN001
    cases = _cases()
    ready = family_cases(bundle, list(cases.values()))
    out = vllm_family(vllm_ref, tool="muse_glimmer", reasoning="muse_glimmer", bundle=bundle, tools=TOOLS,
                      cases=ready)
    assert not out.infra_errors(), out.infra_errors()
    results = dict(zip(cases, out.results, strict=True))
    parser = MuseGlimmerReasoningParser(bundle.tokenizer)
    bad = reasoning_mismatches(parser, cases, results, bundle, DIVERGENCES)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    assert_counts_and_composed(parser, "muse_glimmer", cases, ready, results, bundle, COMPOSED_DIVERGENCES)


# Composed, our answer goes to the tool parser framed (MuseGlimmerReasoningParser
# .for_tool_parser), so ATEM echoed in it stays its text, as in vLLM's batch; hence:
_SPLIT = ("the answer through the tool parser's split ends at <|start|> / a header; vLLM's "
          "raw first to=user body runs to <|eot|> / <|eom|>")
COMPOSED_DIVERGENCES: dict[str, str] = {
    "own:header_ws_and_goto": _SPLIT, "own:start_cuts_body": _SPLIT,
    **{name: DIVERGENCES[name] for name in (
        "g:empty_self", "g:closed_then_open", "g:self_into_tool", "g:tool_then_self_truncated",
        "g:long_text_before_self", "g:long_text_before_user")},
    **LONG_DIVERGENCES,  # the tool side's, through the composition
    # (the remainder's ATEM makes the long text content for vLLM's reasoning parser, and its
    # tool parser then drops it before the first header; ours streamed it)
    "g:long_text_then_call": LONG_DIVERGENCES["own:long_text_before_header"],
}


@pytest.mark.parametrize("composed", [False, True])
def test_muse_glimmer_reasoning_stream_equals_batch(bundle, composed: bool) -> None:  # noqa: ANN001
    tool = get_tool_parser("muse_glimmer")(bundle.tokenizer, TOOLS) if composed else None
    chat = ChatParser(MuseGlimmerReasoningParser(bundle.tokenizer), tool,
                      ChatOptions(tool_choice="auto", enable_auto_tools=True))
    texts = [*TOOL_OWN.values(), *OWN.values()]
    texts += [c["text"] for c in family_cases_for(["muse_glimmer"], {}, max_cuts=3).values()
              if "\ufffd" not in c["text"]]  # (no tokenizer round trip)
    for text in texts:
        check_chunking(chat, bundle, text, n_random=2)


def test_muse_glimmer_reasoning_end_on_prompt(bundle) -> None:  # noqa: ANN001
    parser = MuseGlimmerReasoningParser(bundle.tokenizer)
    turn = "<|start|>user<|message|>hi<|eot|><|start|>assistant"
    assert not parser.is_reasoning_end(bundle.encode(turn + R))
    assert parser.is_reasoning_end(bundle.encode(turn + R + msg("read", invoke("read", path="a"))))
    assert not parser.is_reasoning_end(bundle.encode(turn + " " + S + invoke("read", path="a") + "<|eom|>"))


def test_muse_glimmer_reasoning_state_stays_small() -> None:
    parser = MuseGlimmerReasoningParser(None)
    text = R + msg("self", "r" * 20000) + msg("user", "c" * 5000, "<|eot|>")
    state, biggest, reasoning = parser.initial_state(), 0, 0
    for i in range(0, len(text), 7):
        state, events = parser.feed(state, text[i : i + 7])
        reasoning += sum(len(e.text) for e in events if type(e).__name__ == "ReasoningDelta")
        biggest = max(biggest, len(json.dumps(state.to_json())))
    assert biggest < 400, biggest
    assert reasoning == len("thinking\n") + 20000


@pytest.mark.parametrize("header", ["", R + msg("user", "ans", "<|eot|>")])
def test_muse_glimmer_state_small_before_the_first_header(bundle, header: str) -> None:  # noqa: ANN001
    assert_pre_header_not_held(MuseGlimmerReasoningParser(bundle.tokenizer), bundle, header)
