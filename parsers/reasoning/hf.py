"""vLLM 0.33 `hf` (ResponseTemplateReasoningParser) and `beam` (BeamReasoningParser):
reasoning by the checkpoint's `response_template` (parsers/_response_template_family.py)."""

from __future__ import annotations

from parsers._response_template_family import ResponseTemplateReasoning


class HfReasoningParser(ResponseTemplateReasoning):
    name = "hf"


class BeamReasoningParser(ResponseTemplateReasoning):
    name = "beam"
