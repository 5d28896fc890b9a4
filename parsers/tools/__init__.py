"""Tool-call parser families, one module per family, each a `parsers._base.ToolParser`.

Registration is data-driven: `TOOL_PARSER_MODULES` maps every vLLM `--tool-call-parser`
name to the "module:Class" that implements it. `parsers.registry` imports a module only when
its name is asked for, so one broken family never breaks the others. Adding a family means
adding its module here; the class must set `name` to its primary vLLM name.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TOOL_PARSER_MODULES", "TOOL_PARSER_TRAITS", "ToolParserTraits", "tool_parser_traits"]

TOOL_PARSER_MODULES: dict[str, str] = {
    "hf": "parsers.tools.hf:HfToolParser",
    "beam": "parsers.tools.hf:BeamToolParser",
    "hermes": "parsers.tools.hermes_parser:HermesToolParser",
    "qwen3_json": "parsers.tools.hermes_parser:HermesToolParser",
    "llama3_json": "parsers.tools.llama3_json:Llama3JsonToolParser",
    "llama4_json": "parsers.tools.llama3_json:Llama3JsonToolParser",
    "mistral": "parsers.tools.mistral:MistralToolParser",
    "pythonic": "parsers.tools.pythonic:PythonicToolParser",
    "llama4_pythonic": "parsers.tools.pythonic:Llama4PythonicToolParser",
    "olmo3": "parsers.tools.olmo3:Olmo3PythonicToolParser",
    "qwen3_coder": "parsers.tools.qwen3_coder:Qwen3CoderToolParser",
    "qwen3_xml": "parsers.tools.qwen3_coder:Qwen3CoderToolParser",
    "step3p5": "parsers.tools.step3p5:Step3p5ToolParser",
    "step5": "parsers.tools.step5:Step5ToolParser",
    "step3": "parsers.tools.step3:Step3ToolParser",
    "poolside_v1": "parsers.tools.poolside_v1:PoolsideV1ToolParser",
    "deepseek_v3": "parsers.tools.deepseek_v3:DeepSeekV3ToolParser",
    "deepseek_v31": "parsers.tools.deepseek_v31:DeepSeekV31ToolParser",
    "granite": "parsers.tools.granite:GraniteToolParser",
    "ernie45": "parsers.tools.ernie45:Ernie45ToolParser",
    "glm45": "parsers.tools.glm47:Glm47ToolParser",
    "glm47": "parsers.tools.glm47:Glm47ToolParser",
    "hunyuan_a13b": "parsers.tools.hunyuan_a13b:HunyuanA13BToolParser",
    "xlam": "parsers.tools.xlam:XlamToolParser",
    "openai": "parsers.tools.openai:OpenAIToolParser",
    "phi4_mini_json": "parsers.tools.phi4_mini_json:Phi4MiniJsonToolParser",
    "gemma4": "parsers.tools.gemma4:Gemma4ToolParser",
    "jamba": "parsers.tools.jamba:JambaToolParser",
    "hy_v3": "parsers.tools.hy_v3:HyV3ToolParser",
    "hy_v4": "parsers.tools.hy_v4:HyV4ToolParser",
    "functiongemma": "parsers.tools.functiongemma:FunctionGemmaToolParser",
    "kimi_k2": "parsers.tools.kimi_k2:KimiK2ToolParser",
    "internlm": "parsers.tools.internlm:InternLMToolParser",
    "minimax_m2": "parsers.tools.minimax_m2:MinimaxM2ToolParser",
    "gigachat3": "parsers.tools.gigachat3:GigaChat3ToolParser",
    "longcat": "parsers.tools.longcat:LongcatToolParser",
    "minimax_m3": "parsers.tools.minimax_m3:MinimaxM3ToolParser",
    "plamo3": "parsers.tools.plamo3:Plamo3ToolParser",
    "granite4": "parsers.tools.granite4:Granite4ToolParser",
    "seed_oss": "parsers.tools.seed_oss:SeedOssToolParser",
    "lfm2": "parsers.tools.lfm2:Lfm2ToolParser",
    "granite-20b-fc": "parsers.tools.granite_20b_fc:Granite20bFCToolParser",
    "deepseek_v32": "parsers.tools.deepseek_v32:DeepSeekV32ToolParser",
    "deepseek_v4": "parsers.tools.deepseek_v4:DeepSeekV4ToolParser",
    "deepseek_v41": "parsers.tools.deepseek_v4:DeepSeekV41ToolParser",
    "k2_horizon": "parsers.tools.k2_horizon:K2HorizonToolParser",
    "ling3": "parsers.tools.glm47:Ling3ToolParser",
    "mimo": "parsers.tools.mimo:MimoToolParser",
    "inkling": "parsers.tools.inkling:InklingToolParser",
    "apertus": "parsers.tools.apertus:ApertusToolParser",
    "dots": "parsers.tools.dots:DotsToolParser",
    "cohere_command3": "parsers.tools.cohere_command:CohereCommand3ToolParser",
    "cohere_command4": "parsers.tools.cohere_command:CohereCommand4ToolParser",
    "muse": "parsers.tools.muse:MuseToolParser",
    "musespark1x": "parsers.tools.muse:MuseToolParser",
    "muse_glimmer": "parsers.tools.muse:MuseGlimmerToolParser",
    "kimi_k3": "parsers.tools.kimi_k3:KimiK3ToolParser",
    "minicpm5": "parsers.tools.minicpm5:MiniCPM5ToolParser",
}


@dataclass(frozen=True)
class ToolParserTraits:
    """How vLLM 0.33's serving layer treats a family (read off its ToolParser class).

    supports_required_and_named: False makes tool_choice="required"/named use the family's own
    format (as "auto") instead of the JSON forms. In 0.33 every parser with an xgrammar
    `structural_tag_model` has it False (VLLM_ENFORCE_STRICT_TOOL_CALLING defaults on).
    engine_based: runs on vLLM's parser engine (`engine_based_streaming`), which changes the
    content returned with tool_choice="none" or when no call is found, and whose
    `adjust_request` always sets skip_special_tokens=False.
    structural_tag_model: the class's xgrammar `structural_tag_model` (render builds the tag).
    keeps_special_tokens: `adjust_request` sets skip_special_tokens=False when the request has
    tools and tool_choice is not "none" (Hermes and the families built on it).
    tool_view: what of the request's tools the parser reads, so a stream state carries only
    that (`parsers.tools._schema.encode_tools`): "presence", "names", "types" or "required".
    json_schema_choice: required/named tool_choice without a structural tag becomes vLLM's
    JSON-schema `structured_outputs` (False where the family's `adjust_request` builds its own).
    default_tool_strict_level: the class's `default_tool_strict_level`, the structural-tag
    level when `--tool-strict-level` is not given.
    engine_keeps_special_tokens: False where an engine family's `adjust_request` does not set
    skip_special_tokens=False (MiniMax-M3).
    always_keeps_special_tokens: `adjust_request` sets skip_special_tokens=False on every
    request (Muse).
    xtml: Kimi K3's `adjust_request`: special tokens kept and unspaced whenever it runs, and a
    named tool_choice without the structural tag is refused.
    structural_tag_auto: False where the class's `get_structural_tag` builds no tag for
    tool_choice="auto" (hy_v4: only required / named, or auto with a user format).
    """

    supports_required_and_named: bool = True
    engine_based: bool = False
    structural_tag_model: str | None = None
    keeps_special_tokens: bool = False
    tool_view: str = "types"
    json_schema_choice: bool = True
    default_tool_strict_level: str = "auto"
    engine_keeps_special_tokens: bool = True
    always_keeps_special_tokens: bool = False
    xtml: bool = False
    structural_tag_auto: bool = True


_NATIVE_FORMAT = ToolParserTraits(supports_required_and_named=False)
_NATIVE_ENGINE = ToolParserTraits(supports_required_and_named=False, engine_based=True)

# Checked against vLLM's own classes by tests/parsers/test_differential.py.
_HERMES = ToolParserTraits(supports_required_and_named=False, structural_tag_model="hermes",
                           keeps_special_tokens=True, tool_view="presence")  # fmt: skip
_LLAMA = ToolParserTraits(supports_required_and_named=False, structural_tag_model="llama",
                          tool_view="presence")  # fmt: skip
_QWEN_XML = ToolParserTraits(supports_required_and_named=False, engine_based=True,
                             structural_tag_model="qwen_3_coder")  # fmt: skip
_GLM = ToolParserTraits(supports_required_and_named=False, engine_based=True,
                        structural_tag_model="glm_4_7", default_tool_strict_level="function")  # fmt: skip
_RESPONSE_TEMPLATE = ToolParserTraits(supports_required_and_named=False, engine_based=True,
                                      json_schema_choice=False)
_MUSE = ToolParserTraits(supports_required_and_named=False, json_schema_choice=False,
                         always_keeps_special_tokens=True)
TOOL_PARSER_TRAITS: dict[str, ToolParserTraits] = {
    "hermes": _HERMES,
    "qwen3_json": _HERMES,
    "llama3_json": _LLAMA,
    "llama4_json": _LLAMA,
    "mistral": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                                json_schema_choice=False),
    "pythonic": ToolParserTraits(tool_view="presence"),
    "llama4_pythonic": ToolParserTraits(tool_view="presence"),
    "qwen3_coder": _QWEN_XML,
    "qwen3_xml": _QWEN_XML,
    "step3p5": _QWEN_XML,
    "step5": _QWEN_XML,
    # Step3ToolParser: no structural tag; adjust_request keeps special tokens with tools.
    "step3": ToolParserTraits(keeps_special_tokens=True),
    # PoolsideV1ToolParser: own XML format for required/named (no JSON schema guidance).
    "poolside_v1": ToolParserTraits(supports_required_and_named=False, keeps_special_tokens=True,
                                    json_schema_choice=False),
    "deepseek_v3": ToolParserTraits(supports_required_and_named=False,
                                    structural_tag_model="deepseek_r1", tool_view="presence"),
    "deepseek_v31": ToolParserTraits(supports_required_and_named=False,
                                     structural_tag_model="deepseek_v3_1", tool_view="presence"),
    "olmo3": ToolParserTraits(tool_view="presence"),
    "granite": ToolParserTraits(engine_based=True),
    "ernie45": ToolParserTraits(tool_view="presence"),
    "glm45": _GLM,
    "glm47": _GLM,
    "hunyuan_a13b": ToolParserTraits(tool_view="presence"),
    "xlam": ToolParserTraits(tool_view="presence"),
    # GptOssToolParser: a stub with the "harmony" structural tag; HarmonyParser reads names
    # only to build that tag.
    "openai": ToolParserTraits(supports_required_and_named=False, structural_tag_model="harmony",
                               tool_view="names"),
    "phi4_mini_json": ToolParserTraits(tool_view="presence"),
    # adjust_request skips the JSON-schema structured outputs for required/named.
    "gemma4": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                               json_schema_choice=False),
    "jamba": ToolParserTraits(keeps_special_tokens=True, tool_view="presence"),
    "hy_v3": ToolParserTraits(),
    "hy_v4": ToolParserTraits(supports_required_and_named=False, structural_tag_model="hy_v4",
                              structural_tag_auto=False),
    # ResponseTemplateParser (hf) / BeamParser: adjust_request always keeps special tokens;
    # no call found or tool_choice="none" leave the content as the template routes it.
    "hf": _RESPONSE_TEMPLATE,
    "beam": _RESPONSE_TEMPLATE,
    "functiongemma": ToolParserTraits(keeps_special_tokens=True, tool_view="presence"),
    "kimi_k2": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                                structural_tag_model="kimi"),
    "internlm": ToolParserTraits(keeps_special_tokens=True, tool_view="presence"),
    "minimax_m2": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                                   structural_tag_model="minimax"),
    "gigachat3": ToolParserTraits(keeps_special_tokens=True, tool_view="presence"),
    "longcat": ToolParserTraits(supports_required_and_named=False, structural_tag_model="longcat",
                                keeps_special_tokens=True, tool_view="presence"),
    # adjust_request is overridden: the M3 markers decode with special tokens skipped.
    "minimax_m3": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                                   engine_keeps_special_tokens=False),
    "plamo3": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                               structural_tag_model="plamo3"),
    "granite4": ToolParserTraits(keeps_special_tokens=True, tool_view="presence"),
    "seed_oss": ToolParserTraits(engine_based=True),
    "lfm2": ToolParserTraits(keeps_special_tokens=True, tool_view="presence"),
    "granite-20b-fc": ToolParserTraits(tool_view="presence"),
    "deepseek_v32": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                                     structural_tag_model="deepseek_v3_2"),
    "deepseek_v4": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                                    structural_tag_model="deepseek_v4"),
    "deepseek_v41": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                                     structural_tag_model="deepseek_v4_1"),
    # A legacy parser flagged engine_based_streaming; its adjust_request only checks the format.
    "k2_horizon": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                                   engine_keeps_special_tokens=False),
    "ling3": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                              structural_tag_model="glm_4_7"),
    "mimo": ToolParserTraits(supports_required_and_named=False, engine_based=True,
                             structural_tag_model="mimo"),
    "inkling": ToolParserTraits(supports_required_and_named=False, engine_based=True),
    "apertus": ToolParserTraits(keeps_special_tokens=True, tool_view="presence"),
    "dots": _NATIVE_FORMAT,
    # adjust_request: special tokens kept on every request; no JSON schema for required/named.
    "muse": _MUSE,
    "musespark1x": _MUSE,
    "muse_glimmer": _MUSE,
    "kimi_k3": ToolParserTraits(supports_required_and_named=False, structural_tag_model="kimi_k3",
                                tool_view="presence", json_schema_choice=False, xtml=True),
    # adjust_request keeps special tokens with tools; calls are checked against `required`.
    "minicpm5": ToolParserTraits(keeps_special_tokens=True, tool_view="required"),
}


def tool_parser_traits(name: str) -> ToolParserTraits:
    """Traits of the family registered as `name`; vLLM's ToolParser defaults otherwise."""
    return TOOL_PARSER_TRAITS.get(name, ToolParserTraits())
