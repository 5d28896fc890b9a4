"""render_service.mm.qwen2_vl: placeholder expansion, and processing vs the ref venv.

The differential half runs transformers' `Qwen2VLImageProcessorPil` of the vLLM ref venv
(transformers 5.19: what vLLM 0.33 uses there, as it has no torchvision) on the same folder
and images, then decodes our `kwargs_data` items with vLLM's `decode_mm_kwargs_item` and
checks every tensor equals the reference processor's output for that image.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from render_service.errors import BadRequestError
from render_service.mm.family import metadata_item
from render_service.mm.features import expand_placeholders
from render_service.mm.media import decode_image
from render_service.mm.qwen2_vl import Qwen2VLFamily
from render_service.mm.serde import encode_item_b64

from .ref import run_ref_script
from .tiny_vlm import CONFIG, IMAGE_PAD, PREPROCESSOR_CONFIG, png

_REF_SCRIPT = r"""
import base64, io, json, sys
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import decode_mm_kwargs_item
from vllm.multimodal.media.image import ImageMediaIO
request = json.load(sys.stdin)
processor = Qwen2VLImageProcessorPil.from_pretrained(request["model_dir"], local_files_only=True)
images = [ImageMediaIO().load_bytes(base64.b64decode(b)).media for b in request["images"]]
out = processor(images=images, return_tensors="pt")
result = {"grids": out["image_grid_thw"].tolist(), "items": []}
start = 0
for i, grid in enumerate(out["image_grid_thw"]):
    n = int(grid.prod())
    want_pixels = out["pixel_values"][start:start + n]
    start += n
    item = decode_mm_kwargs_item(request["items"][i])
    meta = decode_mm_kwargs_item(request["metadata"][i])
    result["items"].append({
        "pixels_equal": torch.equal(item["pixel_values"].data, want_pixels),
        "max_abs_diff": float((item["pixel_values"].data - want_pixels).abs().max()),
        "grid_equal": torch.equal(item["image_grid_thw"].data, grid),
        "keys": list(item.keys()),
        "metadata_keys": list(meta.keys()),
    })
print(json.dumps(result))
"""


def test_expand_placeholders() -> None:
    ids, ranges = expand_placeholders([1, IMAGE_PAD, 2, 3, IMAGE_PAD, 4], IMAGE_PAD, [[IMAGE_PAD] * 3, [IMAGE_PAD] * 2])
    assert ids == [1, IMAGE_PAD, IMAGE_PAD, IMAGE_PAD, 2, 3, IMAGE_PAD, IMAGE_PAD, 4]
    assert ranges == [{"offset": 1, "length": 3}, {"offset": 6, "length": 2}]
    with pytest.raises(BadRequestError, match="1 image placeholder tokens but the request has 2 images"):
        expand_placeholders([IMAGE_PAD], IMAGE_PAD, [[IMAGE_PAD], [IMAGE_PAD]])


def test_processing_and_encoding_match_the_reference(tmp_path: Path) -> None:
    """Per-image processing (ours, cacheable) equals one batched HF call (vLLM's), normalised."""
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG))
    encoded = [png((90, 60), 1), png((300, 41), 2), png((28, 28), 3)]
    family = Qwen2VLFamily(tmp_path, CONFIG, device_normalize=False)
    processed = [family.process(decode_image(data, max_image_pixels=10**7).image, {}) for data in encoded]
    # The placeholder count rule (prod(grid) / merge**2) on a known case: 90x60 -> grid 1x4x6.
    assert processed[0].tensors["image_grid_thw"].tolist() == [1, 4, 6]
    assert processed[0].num_tokens == 6
    items = family.kwargs_items(processed, "float32")
    request = {
        "model_dir": str(tmp_path),
        "images": [base64.b64encode(data).decode() for data in encoded],
        "items": [encode_item_b64(item) for item in items],
        "metadata": [encode_item_b64(metadata_item(item, family.metadata_keys)) for item in items],
    }
    reference = run_ref_script(_REF_SCRIPT, request)
    assert reference["grids"] == [item.tensors["image_grid_thw"].tolist() for item in processed]
    for index, item in enumerate(reference["items"]):
        assert item["grid_equal"], index
        assert item["pixels_equal"], (index, item["max_abs_diff"])
        assert item["keys"] == ["pixel_values", "image_grid_thw"]
        assert item["metadata_keys"] == ["image_grid_thw"]


def test_device_normalisation_sends_raw_pixels(tmp_path: Path) -> None:
    """vLLM normalises Qwen2-VL pixels on the device: the CPU tier sends raw 0..255 values."""
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG))
    image = decode_image(png((56, 56), 4), max_image_pixels=10**7).image
    raw = Qwen2VLFamily(tmp_path, CONFIG).process(image, {"do_normalize": True}).tensors["pixel_values"]
    assert raw.min() >= 0 and raw.max() > 1.5 and float(raw.max()) <= 255
