"""A tiny random gpt-oss folder that a real vLLM 0.32 CPU engine loads with `--tokens-only`.

Theory of operation:
- Config, tokenizer and generation config are those of the Harmony differential test's
  weightless folder (tests/render/test_harmony_vllm_differential.py), so our render for this
  folder is what the engine is fed. Only `head_dim` differs: vLLM's CPU attention has no
  kernel for 16-wide heads, so 4 heads of 64 (q_proj 64 -> 256). Render does not depend on it.
- Random bf16 weights (unquantized MoE: vLLM picks its CPU unquantized experts) come from
  `transformers` in the ENGINE venv (the project venv has no torch). `save_pretrained`
  rewrites config.json and generation_config.json; the latter is written again afterwards,
  since its eos ids (<|return|>, <|endoftext|>, <|call|>) are the engine's Harmony stop set.
- Cached under `<cache>/models/tiny-gpt-oss-<hash>` (tiny_model.cached_model_dir).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from ..parsers.tokenizers_util import gpt_oss
from ..render.test_harmony_vllm_differential import GENERATION_CONFIG, GPT_OSS_CONFIG
from .tiny_model import cached_model_dir, run_weight_builder

SEED = 20261208
ENGINE_CONFIG = {**GPT_OSS_CONFIG, "head_dim": 64}

# Run by the engine venv's python: argv[1] is a JSON spec, argv[2] the output folder.
_BUILDER = r"""
import json, sys
import torch
from transformers import GptOssConfig, GptOssForCausalLM
spec = json.loads(sys.argv[1])
torch.manual_seed(spec["seed"])
fields = {k: v for k, v in spec["config"].items() if k not in ("architectures", "model_type", "torch_dtype")}
config = GptOssConfig(**fields)
config.architectures = spec["config"]["architectures"]
GptOssForCausalLM(config).to(torch.bfloat16).save_pretrained(sys.argv[2])
"""


def _inputs_digest() -> str:
    digest = hashlib.sha256()
    spec = {"config": ENGINE_CONFIG, "seed": SEED, "generation": GENERATION_CONFIG}
    digest.update(json.dumps(spec, sort_keys=True).encode())
    digest.update(_BUILDER.encode())
    for name in ("tokenizer.json", "tokenizer_config.json"):
        digest.update((gpt_oss().directory / name).read_bytes())
    return digest.hexdigest()[:16]


def _build_into(folder: Path) -> None:
    run_weight_builder(_BUILDER, {"config": ENGINE_CONFIG, "seed": SEED}, folder, "tiny gpt-oss")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(gpt_oss().directory / name, folder / name)
    (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))


def tiny_gpt_oss_dir() -> Path:
    """Return the cached tiny gpt-oss folder with weights, building it first if needed."""
    return cached_model_dir(f"tiny-gpt-oss-{_inputs_digest()}", _build_into)
