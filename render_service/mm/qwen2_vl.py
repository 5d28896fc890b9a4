"""Qwen2-VL / Qwen2.5-VL images on the render worker (numpy + PIL, no torch).

What vLLM 0.33 does for these models (docs/multimodal-design.md section 3):
- transformers' Qwen2-VL image processor turns each RGB image into `pixel_values`
  `(t*h*w, 3*temporal_patch*patch*patch)` float32 and `image_grid_thw = [t, h, w]` int64. Without
  torchvision transformers uses `Qwen2VLImageProcessorPil`, which is what runs here.
- vLLM normalises these models' pixels on the device (`mm_device_do_normalize`), so the CPU tier
  sends raw 0..255 values: `do_rescale` and `do_normalize` are forced off.
- every `<|image_pad|>` is replaced by `prod(grid_thw) // merge_size**2` copies of itself.
- per item, `pixel_values` is a flat field (slices over the request's concatenated patches) and
  `image_grid_thw` a batched field kept on CPU (also the item's `mm_metadata`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from render_service.errors import BadRequestError
from render_service.mm.family import ProcessedImage, cast_float, known_processor_kwargs
from render_service.mm.serde import BatchedField, FieldElem, FlatField

__all__ = ["ARCHITECTURES", "Qwen2VLFamily"]

ARCHITECTURES = frozenset({"Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration"})
_DEVICE_NORMALIZE = {"do_rescale": False, "do_normalize": False}


class Qwen2VLFamily:
    placeholder = "<|vision_start|><|image_pad|><|vision_end|>"
    metadata_keys = frozenset({"image_grid_thw"})

    def __init__(self, model_dir: Path, hf_config: Mapping[str, Any], *, device_normalize: bool = True) -> None:
        # Imported here: transformers' image stack is only needed by multimodal models.
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
            Qwen2VLImageProcessorPil,
        )

        self._processor = Qwen2VLImageProcessorPil.from_pretrained(str(model_dir), local_files_only=True)
        self.merge_size = int(self._processor.merge_size)
        self.image_token_id = int(hf_config.get("image_token_id", 151655))
        self._forced = _DEVICE_NORMALIZE if device_normalize else {}

    def process(self, image: Image.Image, processor_kwargs: Mapping[str, Any]) -> ProcessedImage:
        kwargs = {**known_processor_kwargs(self._processor, processor_kwargs), **self._forced}
        try:
            out = self._processor(images=[image], return_tensors="np", **kwargs)
        except (TypeError, ValueError) as exc:  # e.g. "absolute aspect ratio must be smaller than 200"
            raise BadRequestError(f"Image preprocessing failed: {exc}", param="messages") from exc
        grid = np.asarray(out["image_grid_thw"], dtype=np.int64)[0]
        patches = int(np.prod(grid))
        return ProcessedImage(
            tensors={
                "pixel_values": np.asarray(out["pixel_values"], dtype=np.float32),
                "image_grid_thw": grid.copy(),
            },
            num_tokens=patches // (self.merge_size**2),
        )

    def replacement(self, item: ProcessedImage) -> list[int]:
        return [self.image_token_id] * item.num_tokens

    def kwargs_items(self, items: Sequence[ProcessedImage], float_dtype: str) -> list[dict[str, FieldElem]]:
        """vLLM shares one flat field over the request: every item carries all items' slices."""
        slices: list[list[tuple[int, int, None]]] = []
        start = 0
        for item in items:
            count = int(item.tensors["pixel_values"].shape[0])
            slices.append([(start, start + count, None)])
            start += count
        pixel_field = FlatField(slices)
        return [
            {
                "pixel_values": FieldElem(cast_float(item.tensors["pixel_values"], float_dtype), pixel_field),
                "image_grid_thw": FieldElem(item.tensors["image_grid_thw"], BatchedField(keep_on_cpu=True)),
            }
            for item in items
        ]
