"""What a vision-language model family must provide to the renderer (one small interface).

vLLM 0.33 handles an image in three model-specific steps, which each family reproduces:
1. the model's HF image processor turns the RGB image into tensors (`process`);
2. the single image token the chat template emits is replaced by the family's expansion
   (`replacement`), and the expansion's span becomes the item's placeholder;
3. the tensors become a `MultiModalKwargsItem` with the model's field layout
   (`kwargs_items`), of which `metadata_keys` are also sent as `mm_metadata`.

Processing is per image (so results can be cached by content hash); the request-wide parts of
the layout (flat-field slices) are computed in `kwargs_items` over all of a request's items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from PIL import Image

from render_service.mm.serde import BFloat16Tensor, FieldElem, to_bfloat16

__all__ = ["ImageFamily", "ProcessedImage", "cast_float", "known_processor_kwargs", "metadata_item"]

# Call options that are ours to choose, never the request's.
_RESERVED_KWARGS = frozenset({"return_tensors", "device", "data_format", "input_data_format"})


@dataclass(frozen=True, slots=True)
class ProcessedImage:
    """One image after the model's processor (numpy arrays as HF returns them)."""

    # Floating tensors are already in the model dtype once the pipeline has them (cast once,
    # before caching: a bfloat16 cast of a megapixel image costs more than its encoding).
    tensors: Mapping[str, np.ndarray | BFloat16Tensor]
    num_tokens: int  # placeholder tokens this image occupies in token_ids

    @property
    def nbytes(self) -> int:
        return sum(int(array.nbytes) for array in self.tensors.values())


class ImageFamily(Protocol):
    """A model family's image handling, loaded once per worker from the model folder."""

    image_token_id: int  # the one token per image that the chat template emits
    placeholder: str  # the text the "string" content format inserts per image

    def process(self, image: Image.Image, processor_kwargs: Mapping[str, Any]) -> ProcessedImage: ...

    def replacement(self, item: ProcessedImage) -> list[int]: ...

    def kwargs_items(self, items: Sequence[ProcessedImage], float_dtype: str) -> list[dict[str, FieldElem]]: ...

    @property
    def metadata_keys(self) -> frozenset[str]: ...


def in_model_dtype(item: ProcessedImage, float_dtype: str) -> ProcessedImage:
    """The item with every floating tensor cast to the model dtype."""
    tensors = {key: cast_float(value, float_dtype) for key, value in item.tensors.items()}
    return ProcessedImage(tensors, item.num_tokens)


def cast_float(array: np.ndarray | BFloat16Tensor, float_dtype: str) -> np.ndarray | BFloat16Tensor:
    """vLLM casts every floating processor output to the model dtype before sending it."""
    if isinstance(array, BFloat16Tensor):
        if float_dtype != "bfloat16":
            raise ValueError(f"a bfloat16 tensor cannot be sent as {float_dtype}")
        return array
    if not np.issubdtype(array.dtype, np.floating):
        return array
    if float_dtype == "bfloat16":
        return to_bfloat16(array)
    if float_dtype in ("float16", "float32"):
        return array.astype(float_dtype, copy=False)
    raise ValueError(f"unsupported model dtype {float_dtype!r}")


def metadata_item(item: Mapping[str, FieldElem], keys: frozenset[str]) -> dict[str, FieldElem] | None:
    """The `mm_metadata` sub-item: keep_on_cpu fields plus the model's declared metadata keys."""
    sub = {key: elem for key, elem in item.items() if elem.field.keep_on_cpu or key in keys}
    return sub or None


def known_processor_kwargs(processor: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The request kwargs this HF image processor takes; others are dropped.

    vLLM hands request kwargs to the model's combined HF processor, which ignores (with a
    warning) keys its image processor does not declare; calling the image processor directly
    would raise instead, so the same keys are dropped here.
    """
    declared = getattr(getattr(processor, "valid_kwargs", None), "__annotations__", None)
    if not declared:
        return {k: v for k, v in kwargs.items() if k not in _RESERVED_KWARGS}
    return {k: v for k, v in kwargs.items() if k in declared and k not in _RESERVED_KWARGS}
