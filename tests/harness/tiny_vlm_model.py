"""A tiny random Qwen2-VL folder that a real vLLM 0.32 CPU engine can load (no model hub).

Theory of operation:
- Config, tokenizer, chat template and preprocessor config are those of
  `tests/multimodal/tiny_vlm.py` (the folder our render tests use), so what our renderer
  produces for this folder is exactly what the engine is fed. Only the attention head count
  differs: vLLM's CPU attention has no kernel for the 16-wide heads of that config (64 / 4),
  so the text model gets 2 heads of 32 (and an mrope section that sums to 32 / 2). Render
  output does not depend on head counts.
- Random bf16 weights come from `transformers` in the ENGINE venv (the project venv has no
  torch), run as a subprocess; `save_pretrained` rewrites config.json (adding
  `"dtype": "bfloat16"`, which our renderer and the engine both resolve as the model dtype).
- Cached under `<cache>/models/tiny-qwen2-vl-<hash>` (hash over every builder input), built
  at most once, atomically, under the same file lock as the tiny Qwen3.
- The engine that serves it: `engines.vision_spec` (torchvision stub, not --tokens-only).
"""

from __future__ import annotations

import copy
import fcntl
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from ..multimodal.tiny_vlm import CONFIG, build_qwen2_vl_dir
from .paths import cache_root
from .tiny_model import QWEN3_EOS_IDS, run_weight_builder

SEED = 20261201
# vLLM CPU attention head sizes are 32, 64, 80, ...: 64 hidden / 2 heads = 32.
CPU_ATTENTION_OVERRIDES = {
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "mrope_section": [4, 6, 6],  # sums to head_dim / 2
}

# Run by the engine venv's python: argv[1] is a JSON spec, argv[2] the output folder.
_BUILDER = r"""
import json, sys
import torch
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
spec = json.loads(sys.argv[1])
torch.manual_seed(spec["seed"])
model = Qwen2VLForConditionalGeneration(Qwen2VLConfig(**spec["config"])).to(torch.bfloat16)
model.save_pretrained(sys.argv[2])
"""


def engine_config() -> dict[str, Any]:
    """tiny_vlm.CONFIG with the head layout vLLM's CPU attention supports."""
    config = copy.deepcopy(CONFIG)
    text = config["text_config"]
    text["num_attention_heads"] = CPU_ATTENTION_OVERRIDES["num_attention_heads"]
    text["num_key_value_heads"] = CPU_ATTENTION_OVERRIDES["num_key_value_heads"]
    text["rope_parameters"]["mrope_section"] = CPU_ATTENTION_OVERRIDES["mrope_section"]
    return config


def _generation_config() -> dict[str, Any]:
    return {"bos_token_id": 151643, "eos_token_id": list(QWEN3_EOS_IDS)}


def _inputs_digest(template_dir: Path) -> str:
    digest = hashlib.sha256()
    spec = {"config": engine_config(), "seed": SEED, "generation": _generation_config()}
    digest.update(json.dumps(spec, sort_keys=True).encode())
    digest.update(_BUILDER.encode())
    for path in sorted(template_dir.iterdir()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _build_weights(folder: Path) -> None:
    run_weight_builder(_BUILDER, {"config": engine_config(), "seed": SEED}, folder, "tiny VLM")
    (folder / "generation_config.json").write_text(json.dumps(_generation_config(), indent=2))


def tiny_qwen2_vl_dir() -> Path:
    """Return the cached tiny Qwen2-VL folder with weights, building it first if needed."""
    models = cache_root() / "models"
    models.mkdir(parents=True, exist_ok=True)
    with open(models / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # The non-weight files, written fresh: their bytes are part of the cache key.
        staging = models / ".staging-tiny-qwen2-vl"
        shutil.rmtree(staging, ignore_errors=True)
        build_qwen2_vl_dir(staging)
        target = models / f"tiny-qwen2-vl-{_inputs_digest(staging)}"
        if (target / "model.safetensors").exists():
            shutil.rmtree(staging)
            return target
        _build_weights(staging)  # overwrites config.json with the full one transformers writes
        staging.rename(target)
    return target
