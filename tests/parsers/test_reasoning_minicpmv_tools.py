"""minicpmv composed with qwen3_coder (MiniCPM-V writes Qwen3-Coder XML; vLLM registers no
minicpmv tool parser): escaped newlines are recovered in reasoning and content, never in tool
arguments. Differential against vLLM's composed MiniCPMVUnifiedParser, stream == batch."""

from __future__ import annotations

import pytest

from .family_run import (
    XML_CASES,
    assert_batches_match,
    assert_streams_match_batch,
    family_run,
    xml_call,
    xml_params_classify,
)

pytestmark = pytest.mark.vllm

ESCAPED = {
    "m:escapes_around_call": "r\\nr</think>Line\\none\\n" + xml_call("search", query="a\\nb `c\\n`")
                             + "\\nafter",
    "m:code_then_call": "r</think>Use `x\\n` then\\n" + xml_call("get_weather", city="P\\naris"),
}

DIVERGENCES = {
    "leading_ws": "content whitespace before text and a later call had streamed (engine rule)",
    "open_value_kept": "a parameter value cut by the end of the output is kept (qwen3_coder)",
    "repeated_parameter": "a repeated parameter is written twice (same object as vLLM's)",
}


@pytest.fixture(scope="module")
def run(vllm_ref):
    extra = {**ESCAPED, **{k: "R.\n</think>\n" + v for k, v in XML_CASES.items()}}
    return family_run(vllm_ref, tool="qwen3_coder", reasoning="minicpmv", extra=extra,
                      corpus_kind="reasoning")


def test_batch_matches_vllm(run):
    assert run.construct == {"tool": None, "reasoning": None, "composed": None}
    assert assert_batches_match(run, DIVERGENCES, xml_params_classify) > 30


def test_stream_equals_batch_on_every_split(run):
    assert_streams_match_batch(run)
