"""Reasoning parser families, one module per family, each a `parsers._base.ReasoningParser`.

Registration is data-driven: `REASONING_PARSER_MODULES` maps every supported vLLM
`--reasoning-parser` name to the "module:Class" implementing it; `parsers.registry` imports a
module only when its name is asked for, so one broken family never breaks the others.
"""

from __future__ import annotations

__all__ = ["REASONING_PARSER_MODULES", "REASONING_KEEPS_SPECIAL_TOKENS", "REASONING_UNSPACES_SPECIAL_TOKENS"]

REASONING_PARSER_MODULES: dict[str, str] = {
    "hf": "parsers.reasoning.hf:HfReasoningParser",
    "beam": "parsers.reasoning.hf:BeamReasoningParser",
    "qwen3": "parsers.reasoning.qwen3:Qwen3ReasoningParser",
    "deepseek_r1": "parsers.reasoning.deepseek_r1:DeepSeekR1ReasoningParser",
    "deepseek_v3": "parsers.reasoning.deepseek_v3:DeepSeekV3ReasoningParser",
    "glm45": "parsers.reasoning.glm45:Glm45ReasoningParser",
    "glm47": "parsers.reasoning.glm45:Glm47ReasoningParser",
    "minimax_m2": "parsers.reasoning.minimax_m2:MinimaxM2ReasoningParser",
    "minimax_m2_append_think": "parsers.reasoning.minimax_m2:MinimaxM2AppendThinkReasoningParser",
    "granite": "parsers.reasoning.granite:GraniteReasoningParser",
    "mistral": "parsers.reasoning.mistral:MistralReasoningParser",
    "nemotron_v3": "parsers.reasoning.nemotron_v3:NemotronV3ReasoningParser",
    "granite_thinking_parser": "parsers.reasoning.granite_thinking:GraniteThinkingReasoningParser",
    "ernie45": "parsers.reasoning.ernie45:Ernie45ReasoningParser",
    "hunyuan_a13b": "parsers.reasoning.hunyuan_a13b:HunyuanA13BReasoningParser",
    "openai_gptoss": "parsers.reasoning.openai_gptoss:GptOssReasoningParser",
    "holo2": "parsers.reasoning.holo2:Holo2ReasoningParser",
    "minicpmv": "parsers.reasoning.minicpmv:MiniCPMVReasoningParser",
    "olmo3": "parsers.reasoning.olmo3:Olmo3ReasoningParser",
    "step3": "parsers.reasoning.step3:Step3ReasoningParser",
    "step5": "parsers.reasoning.step5:Step5ReasoningParser",
    "gemma4": "parsers.reasoning.gemma4:Gemma4ReasoningParser",
    "hy_v3": "parsers.reasoning.hy_v3:HyV3ReasoningParser",
    "hy_v4": "parsers.reasoning.hy_v4:HyV4ReasoningParser",
    "kimi_k2": "parsers.reasoning.kimi_k2:KimiK2ReasoningParser",
    "minimax_m3": "parsers.reasoning.minimax_m3:MinimaxM3ReasoningParser",
    "plamo3": "parsers.reasoning.plamo3:Plamo3ReasoningParser",
    "seed_oss": "parsers.reasoning.seed_oss:SeedOssReasoningParser",
    "step3p5": "parsers.reasoning.step3p5:Step3p5ReasoningParser",
    "poolside_v1": "parsers.reasoning.poolside_v1:PoolsideV1ReasoningParser",
    "deepseek_v4": "parsers.reasoning.deepseek_v4:DeepSeekV4ReasoningParser",
    "deepseek_v41": "parsers.reasoning.deepseek_v4:DeepSeekV41ReasoningParser",
    "ling3": "parsers.reasoning.glm45:Ling3ReasoningParser",
    "k2_horizon": "parsers.reasoning.k2_horizon:K2HorizonReasoningParser",
    "mimo": "parsers.reasoning.qwen3:MimoReasoningParser",
    "inkling": "parsers.reasoning.inkling:InklingReasoningParser",
    "cohere_command3": "parsers.reasoning.cohere_command:CohereCommand3ReasoningParser",
    "cohere_command4": "parsers.reasoning.cohere_command:CohereCommand4ReasoningParser",
    "kimi_k3": "parsers.reasoning.kimi_k3:KimiK3ReasoningParser",
    "muse": "parsers.reasoning.muse:MuseReasoningParser",
    "musespark1x": "parsers.reasoning.muse:MuseSpark1xReasoningParser",
    "muse_glimmer": "parsers.reasoning.muse_glimmer:MuseGlimmerReasoningParser",
}

# Reasoning families whose vLLM class sets skip_special_tokens=False in `adjust_request`
# (every adapter over vLLM's parser engine does; a legacy class that does is listed too).
REASONING_KEEPS_SPECIAL_TOKENS: frozenset[str] = frozenset(
    {"qwen3", "glm45", "glm47", "mistral", "nemotron_v3", "granite_thinking_parser", "minicpmv", "gemma4", "kimi_k2", "minimax_m2", "plamo3", "seed_oss", "step3p5", "deepseek_v4", "deepseek_v41", "ling3", "mimo",
     "inkling", "kimi_k3", "muse", "musespark1x", "muse_glimmer"}
)

# Reasoning families whose `adjust_request` also sets spaces_between_special_tokens=False
# (Kimi K3: its XTML markers are special tokens read as contiguous text).
REASONING_UNSPACES_SPECIAL_TOKENS: frozenset[str] = frozenset({"kimi_k3"})
