"""LLaVA-1.5 style images (`LlavaForConditionalGeneration`) on the render worker (numpy + PIL).

What vLLM 0.33 does for this architecture (`model_executor/models/llava.py`, CLIP/SigLIP towers):
- the model folder's image processor (`CLIPImageProcessor` for llava-1.5) turns each RGB image
  into one `pixel_values` tensor `(3, crop_h, crop_w)`; without torchvision transformers uses its
  PIL backend (`CLIPImageProcessorPil`), which is what runs here.
- the model does not support `mm_device_do_normalize`, so vLLM forces that option off and the
  processor rescales and normalises on the CPU as configured (request kwargs are honoured).
- every image token (`image_token_index`) the template emits is replaced by N copies of itself,
  where N comes from the vision config alone, not from the image: CLIP yields
  `(image_size // patch_size) ** 2 + 1` features (patches + CLS), SigLIP the patches only, and
  `vision_feature_select_strategy` "default" drops the first one ("full" keeps all).
- `pixel_values` is a batched field (not kept on CPU), and the default data parser declares no
  placeholder metadata, so the items have no `mm_metadata`.
- the "string" content format inserts `<image>` per image (vLLM's `get_placeholder_str`).
Pixtral-HF checkpoints share this architecture name but use another processor: refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from render_service.errors import BadRequestError, ConfigError
from render_service.mm.family import ProcessedImage, cast_float, known_processor_kwargs
from render_service.mm.serde import BatchedField, FieldElem

__all__ = ["ARCHITECTURES", "LlavaFamily", "image_feature_count"]

ARCHITECTURES = frozenset({"LlavaForConditionalGeneration"})
# Vision tower model_type -> extra features besides the patch grid (CLIP prepends a CLS token).
_EXTRA_FEATURES = {"clip_vision_model": 1, "siglip_vision_model": 0}


class LlavaFamily:
    placeholder = "<image>"
    metadata_keys: frozenset[str] = frozenset()

    def __init__(
        self, model_dir: Path, hf_config: Mapping[str, Any], *, device_normalize: bool = True
    ) -> None:
        # `device_normalize` is accepted for a uniform constructor but has no effect: vLLM turns
        # `mm_device_do_normalize` off for models that do not support it, LLaVA among them.
        del device_normalize
        # Imported here: transformers' image stack is only needed by multimodal models.
        from huggingface_hub.errors import StrictDataclassError
        from transformers import AutoImageProcessor, LlavaConfig

        try:
            # transformers' config class fills the same defaults vLLM's HF config has.
            config = LlavaConfig.from_dict(dict(hf_config))
        except (TypeError, ValueError, StrictDataclassError) as exc:
            raise ConfigError(f"invalid LLaVA config.json: {exc}") from exc
        self.image_token_id = int(config.image_token_index)
        vision: Any = config.vision_config  # a PreTrainedConfig once from_dict has run
        self.num_image_tokens = image_feature_count(vision.to_dict(), config.vision_feature_select_strategy)
        try:
            # Any: transformers' annotation of from_pretrained differs between releases.
            auto_processor: Any = AutoImageProcessor
            self._processor = auto_processor.from_pretrained(
                str(model_dir), backend="pil", local_files_only=True
            )
        except (OSError, ValueError) as exc:  # no or unusable preprocessor_config.json
            raise ConfigError(
                f"cannot load the LLaVA image processor from {model_dir}: {exc}"
            ) from exc

    def process(self, image: Image.Image, processor_kwargs: Mapping[str, Any]) -> ProcessedImage:
        try:
            kwargs = known_processor_kwargs(self._processor, processor_kwargs)
            out = self._processor(images=[image], return_tensors="np", **kwargs)
        except (TypeError, ValueError) as exc:  # vLLM turns any processor failure into a 400
            raise BadRequestError(f"Image preprocessing failed: {exc}", param="messages") from exc
        # Keep the processor's dtype: vLLM only casts floating outputs to the model dtype.
        pixels = np.ascontiguousarray(np.asarray(out["pixel_values"])[0])
        return ProcessedImage(tensors={"pixel_values": pixels}, num_tokens=self.num_image_tokens)

    def replacement(self, item: ProcessedImage) -> list[int]:
        return [self.image_token_id] * item.num_tokens

    def kwargs_items(
        self, items: Sequence[ProcessedImage], float_dtype: str
    ) -> list[dict[str, FieldElem]]:
        field = BatchedField(keep_on_cpu=False)  # one item per image: no request-wide layout
        pixels = [cast_float(item.tensors["pixel_values"], float_dtype) for item in items]
        return [{"pixel_values": FieldElem(data, field)} for data in pixels]


def image_feature_count(vision_config: Mapping[str, Any], select_strategy: str) -> int:
    """Placeholder tokens per image: the tower's features after `vision_feature_select_strategy`."""
    model_type = vision_config.get("model_type")
    if model_type not in _EXTRA_FEATURES:
        raise ConfigError(
            f"LLaVA vision tower {model_type!r} is not supported (CLIP or SigLIP only)"
        )
    image_size, patch_size = int(vision_config["image_size"]), int(vision_config["patch_size"])
    if model_type == "clip_vision_model" and image_size % patch_size:
        raise ConfigError(
            f"CLIP image_size {image_size} is not a multiple of patch_size {patch_size}"
        )
    features = (image_size // patch_size) ** 2 + _EXTRA_FEATURES[model_type]
    if select_strategy == "default":
        return features - 1
    if select_strategy == "full":
        return features
    if select_strategy == "class":
        return 1
    raise ConfigError(f"unexpected vision_feature_select_strategy {select_strategy!r}")
