"""Real-looking model outputs per reasoning family, including the edge cases of the wire doc §6.3.

Each case is (case_id, output_text). Markers are written with the family's spelling so the
real tokenizers encode them as the single special/added tokens the model would emit.
"""

from __future__ import annotations

__all__ = ["reasoning_corpus", "GRANITE_CORPUS", "TOOL_JSON"]

TOOL_JSON = '{"name": "get_weather", "arguments": {"city": "東京", "unit": "celsius"}}'


def reasoning_corpus(start: str, end: str, tool_open: str = "<tool_call>") -> list[tuple[str, str]]:
    s, e = start, end
    return [
        ("simple", f"This is a reasoning section{e}This is the rest"),
        ("complete", f"This is a reasoning section{e}"),
        ("no_end_token", "This is content, 中文 and emoji 😀 without markers"),
        ("multiline", f"This\nThat{e}This is the rest\nThat"),
        ("shortest", f"{e}This is the rest"),
        ("with_think", f"{s}This is a reasoning section{e}This is the rest"),
        ("think_no_end", f"{s}This is a reasoning section"),
        ("empty", ""),
        ("leading_newline", f"\n{s}This is a reasoning section{e}\nThis is the rest"),
        ("cjk_emoji", f"{s}让我想想……😀 好的。\n{e}\n\n答案是 42 🎉👨‍👩‍👧"),
        ("duplicate_end", f"{s}Reasoning{e}Content{e} more content"),
        ("tool_call_in_reasoning", f"I need to call a tool.\n\n{tool_open}\n{TOOL_JSON}\n</tool_call>"),
        ("tool_call_after_end", f"Think{e}\n\n{tool_open}\n{TOOL_JSON}\n</tool_call>"),
        ("partial_end_at_end", f"{s}Reasoning{e}Content </thi"),
        ("partial_marker_in_reasoning", f"{s}Reasoning cut at <thi"),
        ("double_start", f"{s}A{s}B{e}C"),
        ("trailing_ws_reasoning", f"{s}Reasoning   \n\n{e}Content"),
        ("only_whitespace_reasoning", f"{s}\n\n{e}\n\nContent"),
        ("special_token_in_content", f"{s}R{e}Answer<|im_end|>"),
        ("markup_lookalike", "R with a </b> tag and 1 > 0 and <thinking> word"),
    ]


GRANITE_CORPUS = [
    ("both", "Here is my thought process: I think.\nHere is my response: The answer."),
    ("both_short_form", "Here's my thought process:a b c Here's my response:content"),
    ("empty_response", "Here is my thought process: only thoughts Here is my response:"),
    ("no_markers", "Just an answer with 中文 😀."),
    ("empty", ""),
    ("prefix_only", "Here is my thought"),
    ("unicode", "Here is my thought process: 让我想想 😀\nHere is my response: 好的 🎉"),
    ("two_responses", "Here is my thought process: A Here is my response: B Here is my response: C"),
]
