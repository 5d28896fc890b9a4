"""pythonic / llama4_pythonic: split invariance on real Llama tokens and differential tests
against vLLM 0.33's PythonicToolParser and Llama4PythonicToolParser."""

from __future__ import annotations

import pytest
from .tool_parser_support import assert_matches_vllm, assert_split_invariant, llama3, llama4

from parsers.tools.pythonic import Llama4PythonicToolParser, PythonicToolParser

CORPUS: dict[str, str] = {
    "plain_content": "The capital of France is Paris. 🇫🇷",
    "single_call": "[get_weather(city='Paris', unit='c')]",
    "two_calls": "[get_weather(city='Paris'), search(query=\"café\", filters={'a': [1, 2.5]})]",
    "cjk_emoji_args": "[search(query='北京天气 ☔', filters={'lang': 'zh', 'emoji': '🙂'})]",
    "nested_literals": "[search(filters={'x': {'y': [(1, 2), {3}, None, True, -4.5, f'z']}}, query=null)]",
    "string_serialised_args": "[get_weather(city='{\"name\": \"Rome\"}')]",
    "no_arguments": "[get_weather()]",
    "dotted_name": "[weather.get(city='Oslo')]",
    "positional_arg": "[get_weather('Paris')]",
    "malformed_python": "[get_weather(city='Paris']",
    "truncated_at_eos": "[get_weather(city='Par",
    "not_a_literal": "[get_weather(city=some_var)]",
    "text_after_list": "[get_weather(city='Paris')]\nDone.",
    "markdown_link": "[docs](https://example.com) explain this.",
    "citation": "[1] Smith et al. say so.",
    "lone_bracket_at_end": "See the list [",
    "partial_marker_at_end": "[get_weather",
    "leading_space": " [get_weather(city='Paris')]",
    "empty_list": "[]",
    "kwargs_splat": "[get_weather(**{'city': 'Paris'})]",
}

LLAMA4_CORPUS: dict[str, str] = {
    **CORPUS,
    "python_start_call": "<|python_start|>[get_weather(city='Paris')]<|python_end|>",
    "python_start_bad": "<|python_start|>print('hi')<|python_end|>",
    "python_start_partial_end": "<|python_start|>[get_weather(city='Paris')]<|python_",
}

# vLLM's stream differs from its own batch here; ours follows vLLM's batch.
STREAM_LOSSES = frozenset(
    {
        "malformed_python",  # stream: a call from the auto-completed prefix; batch: content
        "truncated_at_eos",
        "not_a_literal",  # stream: nothing; batch: content
        "text_after_list",  # stream: the call; batch: content (the whole output must parse)
        "markdown_link",  # stream: nothing (starts with "["); batch: content
        "citation",
        "partial_marker_at_end",
        "positional_arg",
        "empty_list",
        "dotted_name",  # stream: the call; batch: content (the regex wants a plain name)
        "kwargs_splat",  # stream: a call with a "null" key; batch: content
    }
)
LLAMA4_STREAM_LOSSES = STREAM_LOSSES | {"python_start_bad", "python_start_partial_end"}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_pythonic_split_invariant(case: str) -> None:
    """Streaming any split of a real Llama 3 token sequence yields exactly the batch result."""
    assert_split_invariant(PythonicToolParser(llama3().vocab, []), CORPUS[case], llama3().chunks(CORPUS[case]))


@pytest.mark.parametrize("case", sorted(set(LLAMA4_CORPUS) - set(CORPUS)))
def test_llama4_pythonic_split_invariant(case: str) -> None:
    """Same, for the Llama 4 markers, on real Llama 4 tokens."""
    text = LLAMA4_CORPUS[case]
    assert_split_invariant(Llama4PythonicToolParser(llama4().vocab, []), text, llama4().chunks(text))


@pytest.mark.vllm
def test_pythonic_matches_vllm(vllm_oracle) -> None:
    """Batch == vLLM 0.33 batch; stream == vLLM's stream where vLLM's is lossless."""
    assert_matches_vllm(
        vllm_oracle, "pythonic", PythonicToolParser(llama3().vocab, []), llama3(), CORPUS,
        stream_losses=STREAM_LOSSES,
    )


@pytest.mark.vllm
def test_llama4_pythonic_matches_vllm(vllm_oracle) -> None:
    """Same against Llama4PythonicToolParser (strips <|python_start|>, drops <|python_end|>)."""
    assert_matches_vllm(
        vllm_oracle, "llama4_pythonic", Llama4PythonicToolParser(llama4().vocab, []), llama4(),
        LLAMA4_CORPUS, stream_losses=LLAMA4_STREAM_LOSSES,
    )


def test_pythonic_content_streams_early() -> None:
    """An output that cannot be a call list is released as content from its first chars."""
    parser = PythonicToolParser(llama3().vocab, [])
    _, events = parser.feed(parser.initial_state(), "[docs", "r")
    assert events == []
    state, events = parser.feed(parser.initial_state(), "[docs]", "r")
    assert [e.text for e in events] == ["[docs]"]
