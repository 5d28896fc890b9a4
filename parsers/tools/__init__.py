"""Tool-call parser families, one module per family, each a `parsers._base.ToolParser`.

Registration is data-driven: `TOOL_PARSER_MODULES` maps every vLLM `--tool-call-parser`
name to the "module:Class" that implements it. `parsers.registry` imports a module only when
its name is asked for, so one broken family never breaks the others. Adding a family means
adding its module here; the class must set `name` to its primary vLLM name.
"""

from __future__ import annotations

__all__ = ["TOOL_PARSER_MODULES"]

TOOL_PARSER_MODULES: dict[str, str] = {
    "hermes": "parsers.tools.hermes_parser:HermesToolParser",
    "qwen3_json": "parsers.tools.hermes_parser:HermesToolParser",
    "llama3_json": "parsers.tools.llama3_json:Llama3JsonToolParser",
    "llama4_json": "parsers.tools.llama3_json:Llama3JsonToolParser",
    "mistral": "parsers.tools.mistral:MistralToolParser",
    "pythonic": "parsers.tools.pythonic:PythonicToolParser",
    "llama4_pythonic": "parsers.tools.pythonic:PythonicToolParser",
    "qwen3_coder": "parsers.tools.qwen3_coder:Qwen3CoderToolParser",
    "qwen3_xml": "parsers.tools.qwen3_coder:Qwen3CoderToolParser",
    "deepseek_v3": "parsers.tools.deepseek_v3:DeepSeekV3ToolParser",
    "deepseek_v31": "parsers.tools.deepseek_v31:DeepSeekV31ToolParser",
    "granite": "parsers.tools.granite:GraniteToolParser",
}
