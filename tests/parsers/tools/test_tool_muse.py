"""Muse Spark / Glimmer ATEM tools (vLLM's MuseToolParser `muse` / `musespark1x`,
MuseGlimmerToolParser `muse_glimmer`): batch == vLLM 0.33's tool parser on the Muse corpus,
hostile variants, vLLM's own test strings and our cases (one oracle call per class); the
composed batch (tool parser alone) == vLLM's DelegatingParser but for its raw content without
calls, and a call the output cuts (kept: it had streamed); streaming == batch on every split,
the state restored at every boundary and small."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parsers._events import ToolArgsDelta
from parsers.chat import ChatOptions, ChatParser
from parsers.registry import get_tool_parser
from parsers.tools.muse import PRE_HEADER_CHARS, MuseGlimmerToolParser, MuseToolParser

from ..family_tokenizers import family_tokenizer
from .engine_family_support import (
    assert_stream_equals_batch,
    batch_mismatches,
    family_cases_for,
    repeated_keys_same_object,
    run_oracle,
)
from .tool_parser_support import assert_split_invariant, stream_args

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "read", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "math.add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "note": {"type": "string"}}}}},
]  # fmt: skip

S = "<|start|>assistant "


def invoke(name: str, **params: str) -> str:
    body = "".join(f'<atem:parameter name="{k}">{v}</atem:parameter>\n' for k, v in params.items())
    return f'<atem:function_calls>\n<atem:invoke name="{name}">\n{body}</atem:invoke>\n</atem:function_calls>'


def msg(rcpt: str | None, body: str, end: str = "<|eom|>") -> str:
    head = f"to={rcpt}" if rcpt is not None else ""
    return f"{S}{head}<|message|>{body}{end}"


R = " to=self<|message|>thinking<|eom|>"
OWN: dict[str, str] = {
    # vLLM's tests/parser/engine/test_muse_glimmer.py strings
    "vllm:bare_header": " <|message|>public text<|eot|>",
    "vllm:prose_to": " to=self<|message|>set flag to=5 and send it to=alice<|eom|>" + msg("user", "done", "<|eot|>"),
    "vllm:bare_tool_header_without_eom": " to=self<|message|>calling now to=weather.get<|message|>"
                                         + invoke("weather.get", city="Paris"),
    "vllm:multiple_reasoning": " to=self<|message|>A<|eom|>" + msg("self", "B") + msg("user", "C", "<|eot|>"),
    # ours
    "own:doubled_name": R + msg("read.read", invoke("read.read", path="/etc/h", n="3")),
    "own:unregistered_leaf": R + msg("weather.read", invoke("weather.read", path="x")),
    "own:string_param_kept_raw": R + msg("read", invoke("read", path="123", n="007")),
    "own:json_values": R + msg("math.add", invoke("math.add", a="1e3", note="[1, 2]", extra='{"k": [true, null]}',
                                               s='"quoted"', bad="{nope", nan="NaN")),
    "own:commentary_and_developer": msg("commentary", "update ") + msg("developer", "hidden") + msg("user", "fin", "<|eot|>"),
    "own:invoke_in_user_answer": msg("user", "see " + invoke("read", path="x"), "<|eot|>"),
    "own:invoke_in_reasoning": " to=self<|message|>maybe " + invoke("read", path="x") + "<|eom|>" + msg("user", "no", "<|eot|>"),
    "own:unframed_invoke": "plain " + invoke("read", path="x"),
    "own:unframed_text": "Just text, no framing <atem:nothing> here.",
    "own:two_tool_messages": R + msg("read", invoke("read", path="a")) + msg("math.add", invoke("math.add", a="2"))
                             + msg("user", "both done", "<|eot|>"),
    "own:invoke_across_messages": ' to=a.b<|message|><atem:invoke name="a.b"><|eom|>' + msg("c", "</atem:invoke>"),
    "own:unclosed_invoke": R + msg("read", '<atem:function_calls>\n<atem:invoke name="read">\n<atem:parameter name="path">/x', ""),
    "own:unclosed_param": R + msg("read", '<atem:invoke name="read"><atem:parameter name="path">a'
                                          '<atem:parameter name="n">2</atem:parameter></atem:invoke>'),
    "own:repeated_param": R + msg("read", invoke("read", path="a", n="1").replace("</atem:invoke>", '<atem:parameter name="path">b</atem:parameter></atem:invoke>')),
    "own:no_name": R + msg("read", "<atem:invoke><atem:parameter name=\"p\">1</atem:parameter></atem:invoke>"),
    "own:invokes_word": R + msg("read", '<atem:invokes name="read"></atem:invoke>' + invoke("read", path="q")),
    "own:header_ws_and_goto": " to=user<|message|>a   to=x<|message|>b" + msg("user", "goto=read<|message|>y"),
    "own:start_cuts_body": " to=user<|message|>a <|start|>junk<|eom|>to=user<|message|>c<|eot|>",
    "own:partial_markers_in_body": " to=user<|message|>a <| b <|eo c to=x d\n  e<|eot|>",
    "own:text_before_first_header": "junk before " + msg("user", "answer", "<|eot|>"),
    "own:cjk_emoji": R + msg("read", invoke("read", path="東京 😀 \"q\" \\ \n")) + msg("user", "北京 ☂️", "<|eot|>"),
    "own:open_user_body": " to=user<|message|>the answer is still stream",
    "own:empty_bodies": " to=user<|message|><|eot|>",
    "own:glimmer_recipients": " <|message|>bare" + msg("commentary", invoke("read", path="c")) + msg("developer", "d"),
    # Text before the first header is held up to PRE_HEADER_CHARS
    "own:long_unframed_invoke": "plain words <|eom|> " * 20 + invoke("read", path="x", n="[1, 2]"),
    "own:long_text_before_header": "x" * (PRE_HEADER_CHARS + 1) + " to=user<|message|>answer<|eot|>",
    # Values longer than HOLD_CHARS stream (parsers/tools/_json_value.py)
    "own:long_json_value": R + msg("math.add", invoke("math.add", a="2", extra=json.dumps(
        {"rows": [{"id": i, "name": f"n\u00e9{i}", "ok": i % 2 == 0, "w": i / 4} for i in range(9)]}, indent=1))),
    "own:long_text_value": R + msg("read", invoke("read", n="def f(x):\n    return {x: [x, 'y']}\n" * 9)),
    "own:long_string_json_value": R + msg("read", invoke("read", n=json.dumps("q\" \\ é\n" * 60))),
    "own:long_value_breaks": R + msg("read", invoke("read", n="[" + ", ".join(map(str, range(90))) + "] and more")),
    "own:long_value_cut_by_invoke": R + msg("read", '<atem:invoke name="read"><atem:parameter name="n">['
                                            + "1, " * 90 + "</atem:invoke>"),
}


CUT = "a call the output cuts is kept, as streamed (vLLM drops an invoke never closed)"
LONG_DIVERGENCES = {  # (over HOLD_CHARS / PRE_HEADER_CHARS: streamed, not held)
    "own:long_text_before_header": "text before the first header longer than PRE_HEADER_CHARS had "
                                   "streamed as content (vLLM drops it once a header comes)",
    "own:long_value_breaks": "a value over HOLD_CHARS that stops being JSON keeps the canonical text it "
                             "streamed, then its raw text (vLLM: the whole value as a string)",
    "own:long_value_cut_by_invoke": "a value over HOLD_CHARS cut by its invoke's end is kept as far as it "
                                    "streamed (vLLM reads no parameter there)",
}
DIVERGENCES = {"own:unclosed_invoke": CUT, **LONG_DIVERGENCES}
# The composed batch only (the tool parser alone returns None there too).
COMPOSED_DIVERGENCES = {**DIVERGENCES, "muse:hostile:empty": "an empty output has no content (None); vLLM returns ''"}


def cut_call_kept(ours: tuple[str | None, list[tuple[str, str]]], theirs: Any) -> bool:
    """The cut divergence's shape: vLLM's calls plus the one the output cut."""
    return (not isinstance(theirs, str) and ours[0] == theirs[0]
            and len(ours[1]) == len(theirs[1]) + 1 and ours[1][:-1] == theirs[1])  # fmt: skip


@pytest.fixture(scope="module")
def bundle():  # noqa: ANN201
    return family_tokenizer("tool", "muse")


def test_names_map_to_vllms_classes() -> None:
    assert get_tool_parser("muse") is get_tool_parser("musespark1x") is MuseToolParser
    assert get_tool_parser("muse_glimmer") is MuseGlimmerToolParser


@pytest.mark.vllm
@pytest.mark.parametrize("name", ["muse", "muse_glimmer"])
def test_muse_matches_vllm(vllm_ref, bundle, name: str) -> None:  # noqa: ANN001
    cases = family_cases_for(["muse"], OWN)
    _, results = run_oracle(vllm_ref, name, cases, TOOLS, bundle=bundle)
    parser = get_tool_parser(name)(None, TOOLS)
    bad = batch_mismatches(parser, cases, results, DIVERGENCES, cut_divergence=cut_call_kept)
    assert not bad, json.dumps(bad, ensure_ascii=False)[:8000]
    # The composed batch (no reasoning parser): equal, except that without a call vLLM's
    # DelegatingParser returns the raw output (framing included) where ours returns the
    # tool parser's content (what vLLM's stream sends).
    chat = ChatParser(None, parser, ChatOptions(tool_choice="auto", enable_auto_tools=True))
    composed_bad = {}
    for case, res in results.items():
        got, batch = chat.parse(cases[case]["text"], "req-1"), res["batch"]
        ours = (got.content, [(c.name, c.arguments) for c in got.tool_calls])
        theirs = (batch["content"], [(c["name"], c["arguments"]) for c in batch["tool_calls"]])
        # (and a cut call: vLLM makes none, so it returns the raw output; a repeated parameter)
        raw_without_calls = (not theirs[1] and not ours[1] and theirs[0] == (cases[case]["text"] or None)
                             and ours[0] == res["tool"]["content"])  # fmt: skip
        if case in COMPOSED_DIVERGENCES:
            if ours == theirs:
                composed_bad[case] = "named divergence does not diverge"
        elif ours != theirs and not raw_without_calls and not repeated_keys_same_object(ours, theirs) and not (
                ":hostile:cut@" in case and (cut_call_kept(ours, theirs) or (
                    not theirs[1] and theirs[0] == cases[case]["text"] and len(ours[1]) == 1))):
            composed_bad[case] = {"ours": ours, "vllm": theirs}
    assert not composed_bad, json.dumps(composed_bad, ensure_ascii=False)[:8000]


@pytest.mark.parametrize("cls", [MuseToolParser, MuseGlimmerToolParser])
def test_muse_stream_equals_batch(bundle, cls) -> None:  # noqa: ANN001
    parser = cls(None, TOOLS)
    # Glimmer differs in recipient sets and the string rule only: our cases suffice there.
    texts = [c["text"] for c in family_cases_for(["muse"], OWN, max_cuts=3).values()] if cls is MuseToolParser \
        else list(OWN.values())
    assert_stream_equals_batch(parser, bundle, [t for t in texts if "\ufffd" not in t])
    for text in (t for t in texts if "\ufffd" in t):  # no tokenizer round trip: per character
        assert_split_invariant(parser, text, [(ch, []) for ch in text])


def test_muse_state_stays_small_on_long_bodies() -> None:
    parser = MuseToolParser(None, TOOLS)
    text = R + msg("self", "r" * 5000) + msg("user", "c" * 5000 + "  \t", "<|eot|>") + "to=x"
    state, biggest = parser.initial_state(), 0
    for i in range(0, len(text), 7):
        state, _ = parser.feed(state, text[i : i + 7], "r")
        biggest = max(biggest, len(json.dumps(state.to_json())))
    assert biggest < 600, biggest
    assert parser.parse(text, "r").content == "c" * 5000 + "  \t"


def test_muse_string_argument_streams_with_small_state() -> None:
    parser = MuseToolParser(None, TOOLS)
    value = "λ" * 3000 + ' "q" \\ ' + "x" * 3000
    text = R + msg("read", invoke("read", path=value, n="12"))
    state, biggest, args = parser.initial_state(), 0, []
    for i in range(0, len(text), 5):
        state, events = parser.feed(state, text[i : i + 5], "r")
        args += [e.text for e in events if isinstance(e, ToolArgsDelta)]
        biggest = max(biggest, len(json.dumps(state.to_json())))
    state, events = parser.finish(state, "r")
    args += [e.text for e in events if isinstance(e, ToolArgsDelta)]
    assert biggest < 1024, biggest
    assert len(args) > 100  # the value went out in fragments
    assert json.loads("".join(args)) == {"path": value, "n": 12}


@pytest.mark.parametrize("cls", [MuseToolParser, MuseGlimmerToolParser])
def test_muse_object_argument_streams_with_small_state(bundle, cls) -> None:  # noqa: ANN001
    """A ~20k-character object value, one token per chunk: its JSON streams and the largest
    state stays under 2 KB (the value is never held)."""
    parser = cls(None, TOOLS)
    value = {"rows": [{"id": i, "name": f"row {i} \u00e9", "tags": ["a", "b"], "ok": i % 3 == 0}
                      for i in range(200)]}
    text = R + msg("read", invoke("read", n=json.dumps(value, indent=1)))
    assert len(text) > 20000
    args, biggest = stream_args(parser, bundle.pieces(text))
    assert biggest < 2048, biggest
    assert args == parser.parse(text, "r").tool_calls[0].arguments
    assert json.loads(args) == {"n": value}


@pytest.mark.parametrize(("reasoning", "tool"), [(None, "muse"), ("muse", "muse"), ("muse_glimmer", "muse_glimmer")])
def test_muse_text_before_the_first_header_is_not_held(bundle, reasoning: str | None, tool: str) -> None:  # noqa: ANN001
    """~20k characters before any header (tool parser alone and composed), one token per
    chunk with the state round-tripped: the largest state stays under 2 KB, the text and the
    call in it stream as content and a call, as our batch has them."""
    from parsers.registry import get_reasoning_parser

    r_parser = get_reasoning_parser(reasoning)(bundle.tokenizer) if reasoning else None
    chat = ChatParser(r_parser, get_tool_parser(tool)(bundle.tokenizer, TOOLS),
                      ChatOptions(tool_choice="auto", enable_auto_tools=True))  # fmt: skip
    text = "Some text before any header, <|eom|> to= t <| and on. " * 380 + invoke("read", path="p")
    state, biggest, content, args = chat.initial_state([]), 0, [], []
    for piece in [*bundle.pieces(text), None]:
        state, events = chat.finish(state, "r") if piece is None else chat.feed(state, piece, "r")
        state = type(state).from_json(json.loads(json.dumps(state.to_json())))
        content += [e.text for e in events if type(e).__name__ == "ContentDelta"]
        args += [e.text for e in events if isinstance(e, ToolArgsDelta)]
        biggest = max(biggest, len(json.dumps(state.to_json())))
    assert biggest < 2048, biggest
    batch = chat.parse(text, "r")
    assert ("".join(content) or None, "".join(args)) == (batch.content, batch.tool_calls[0].arguments)
