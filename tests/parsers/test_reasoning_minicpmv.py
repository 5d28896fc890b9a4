"""minicpmv (vLLM 0.33 MiniCPMVParserReasoningAdapter, composed as MiniCPMVUnifiedParser):
the qwen3 grammar plus dropped <|im_end|>/<reserved_*> markers, and escaped newlines recovered
in reasoning and content. Differential against vLLM, thinking on (the template's default)."""

from __future__ import annotations

import pytest

from parsers._newlines import NewlineState, feed_newlines, recover_newlines

from .family_run import THINK_CASES, assert_batches_match, assert_streams_match_batch, family_run

pytestmark = pytest.mark.vllm

# Escaped newlines as MiniCPM-V's tokenizer decodes them (backslash + n), in every span kind.
ESCAPES = {
    "esc:newlines": "step one\\nstep two\n</think>\n\nanswer:\\n- a\\r\\n- b\\rc",
    "esc:code": "r</think>Use `a\\nb` and ```py\nprint('\\n')\n``` then \\n done `open\\n",
    "esc:math": "r</think>$x\\ny$ and $$\\n$$ and \\(\\n\\) and \\[a\\nb\\] end\\n $open\\n",
    "esc:runs": "r\\\\n</think>a\\\\nb \\\\\\n c \\\\\\\\n d",
    "esc:dangling": "r</think>end\\",
    "esc:reasoning_dangling": "reason\\</think>c\\r",
    "esc:reasoning_code_open": "r `x\\n</think>c\\n",
    "markers": "a<|im_end|>b<reserved_12>c</think>d<|reserved_13|>e<reserved_15>",
    "tool_markup": "r</think>\\n<tool_call>\n<function=get_weather>\n<parameter=city>\na\\nb\n"
                   "</parameter>\n</function>\n</tool_call>",
}


@pytest.fixture(scope="module")
def run(vllm_ref):
    return family_run(vllm_ref, reasoning="minicpmv", extra={**THINK_CASES, **ESCAPES})


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run) > 20


def test_stream_equals_batch_on_every_split(run):
    assert_streams_match_batch(run)


@pytest.mark.parametrize("text", list(ESCAPES.values()))
def test_newline_recovery_streams_like_batch(text):
    expected = recover_newlines(text)
    for size in (1, 2, 3, 5):
        state, out = NewlineState(), []
        for i in range(0, len(text), size):
            state, piece = feed_newlines(NewlineState.from_json(state.to_json()),
                                         text[i:i + size], final=False)
            out.append(piece)
            assert len(state.held) <= 3
        state, piece = feed_newlines(state, "", final=True)
        assert "".join(out) + piece == expected and not state.held
