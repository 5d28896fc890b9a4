"""`seed_oss` reasoning (vLLM 0.33 `SeedOssParserReasoningAdapter` over `vllm/parser/seed_oss.py`):
the `qwen3` reasoning grammar with Seed's markers - `<seed:think>` / `</seed:think>`,
`<seed:tool_call>` ending reasoning implicitly (kept in the content), turn boundaries
`<seed:bos>` / `<seed:eos>`; thinking off (`enable_thinking` falsy) gives the output as content.
"""

from __future__ import annotations

import dataclasses

from parsers.reasoning._engine import Action, EngineSpec, Phase
from parsers.reasoning.qwen3 import QWEN3_SPEC, Qwen3ReasoningParser

__all__ = ["SeedOssReasoningParser", "SEED_OSS_SPEC"]

_RESPELL = {"<think>": "<seed:think>", "</think>": "</seed:think>",
            "<tool_call>": "<seed:tool_call>", "</tool_call>": "</seed:tool_call>"}  # fmt: skip


def _respell(marker: str) -> str:
    return _RESPELL.get(marker, marker)


SEED_OSS_SPEC: EngineSpec = dataclasses.replace(
    QWEN3_SPEC,
    markers=tuple(_respell(m) for m in QWEN3_SPEC.markers),
    actions={(phase, _respell(m)): action for (phase, m), action in QWEN3_SPEC.actions.items()},
    start_marker="<seed:think>",
    end_markers=tuple((_respell(m), to_content) for m, to_content in QWEN3_SPEC.end_markers),
    turn_boundaries=("<seed:bos>", "<seed:eos>"),
)
assert (Phase.REASONING, "<seed:tool_call>") in SEED_OSS_SPEC.actions
assert SEED_OSS_SPEC.actions[(Phase.REASONING, "</seed:think>")] is Action.TO_CONTENT


class SeedOssReasoningParser(Qwen3ReasoningParser):
    name = "seed_oss"
    spec = SEED_OSS_SPEC
