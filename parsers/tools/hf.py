"""vLLM 0.33 `hf` (ResponseTemplateToolParser) and `beam` (BeamToolParser): tool calls by the
checkpoint's `response_template` (parsers/_response_template_family.py). Beam differs from
hf only in the grammar it sets on requests, not in parsing."""

from __future__ import annotations

from parsers._response_template_family import ResponseTemplateTools


class HfToolParser(ResponseTemplateTools):
    name = "hf"


class BeamToolParser(ResponseTemplateTools):
    name = "beam"
