"""Which image family serves a model folder, and the dtype its tensors are sent in."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from render_service.mm import llava, qwen2_vl
from render_service.mm.family import ImageFamily

__all__ = ["SUPPORTED_ARCHITECTURES", "load_image_family", "resolve_float_dtype"]

FamilyFactory = Callable[[Path, Mapping[str, Any]], ImageFamily]

_FACTORIES: dict[str, FamilyFactory] = {
    **{arch: qwen2_vl.Qwen2VLFamily for arch in qwen2_vl.ARCHITECTURES},
    **{arch: llava.LlavaFamily for arch in llava.ARCHITECTURES},
}
SUPPORTED_ARCHITECTURES = frozenset(_FACTORIES)

_FLAG_DTYPES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32", "float32": "float32"}


def load_image_family(model_dir: Path, hf_config: Mapping[str, Any]) -> ImageFamily | None:
    """The family for the first of config.json's `architectures` we support (None: text-only)."""
    for arch in hf_config.get("architectures") or ():
        factory = _FACTORIES.get(arch)
        if factory is not None:
            return factory(model_dir, hf_config)
    return None


def resolve_float_dtype(flag: str, hf_config: Mapping[str, Any]) -> str:
    """vLLM 0.33's model dtype: `--dtype`, else config.json's, with float32 (or none) -> bfloat16.

    vLLM downcasts float32 checkpoints to the platform's preferred dtype (bfloat16 on CPU and
    on current GPUs) and casts every floating processor output to the model dtype.
    """
    if flag != "auto":
        return _FLAG_DTYPES[flag]
    text_config = hf_config.get("text_config")
    config_dtype = _config_dtype(hf_config) or (_config_dtype(text_config) if isinstance(text_config, Mapping) else None)
    if config_dtype in ("float16", "bfloat16"):
        return config_dtype
    return "bfloat16"


def _config_dtype(config: Mapping[str, Any]) -> str | None:
    value = config.get("dtype") or config.get("torch_dtype")
    if not isinstance(value, str):
        return None
    return {"half": "float16", "float": "float32"}.get(value, value.removeprefix("torch."))
