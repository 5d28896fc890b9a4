"""render_service.mm.hashing vs vLLM 0.33's `ProcessorInputs.get_mm_hashes` (ref venv subprocess).

Each case is loaded by vLLM's own `ImageMediaIO`, parsed by its `MultiModalDataParser` and
hashed by `get_mm_hashes` (the code the render server runs), and by us via `media` + `mm_hash`.
blake3 (vLLM's default) is compared only when the `blake3` package is importable here; the
framing is shared by all algorithms, so sha256/sha512 prove the byte stream.
"""

from __future__ import annotations

import base64
import json
from io import BytesIO
from typing import Any

from PIL import Image

from render_service.mm.hashing import hash_image
from render_service.mm.media import decode_image

from .ref import run_ref_script

_REF_SCRIPT = r"""
import base64, json, sys
from vllm.multimodal.media.image import ImageMediaIO
from vllm.multimodal.parse import MultiModalDataParser
from vllm.multimodal.processing.inputs import ProcessorInputs
out = []
for case in json.load(sys.stdin):
    item = ImageMediaIO().load_bytes(base64.b64decode(case["data"]))
    items = MultiModalDataParser().parse_mm_data({"image": [item]})
    inputs = ProcessorInputs(prompt=[], mm_data_items=items,
                             hf_processor_mm_kwargs=case["mm_processor_kwargs"],
                             media_io_kwargs=case["media_io_kwargs"])
    out.append(inputs.get_mm_hashes(case["model_id"], case["algorithm"])["image"][0])
print(json.dumps(out))
"""


def _encode(image: Image.Image, fmt: str) -> bytes:
    buffer = BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def _cases() -> list[dict[str, Any]]:
    rgb = Image.new("RGB", (6, 4), (200, 10, 30))
    rgba = Image.new("RGBA", (6, 4), (200, 10, 30, 128))
    png, jpeg, transparent = _encode(rgb, "PNG"), _encode(rgb, "JPEG"), _encode(rgba, "PNG")
    plain: dict[str, Any] = {"media_io_kwargs": {}, "mm_processor_kwargs": {}}
    return [
        {"data": png, "model_id": "/models/tiny-qwen2vl", "algorithm": "sha256", **plain},
        {"data": jpeg, "model_id": "Qwen/Qwen2-VL-2B-Instruct", "algorithm": "sha512", **plain},
        {"data": transparent, "model_id": "m", "algorithm": "sha256", **plain},
        {
            "data": png,
            "model_id": "m",
            "algorithm": "sha256",
            "media_io_kwargs": {
                "image": {"rgba_background_color": [0, 0, 0]},
                "video": {"num_frames": 4},
            },
            "mm_processor_kwargs": {
                "max_pixels": 50176,
                "do_resize": True,
                "scale": 0.5,
                "images_kwargs": {"min_pixels": 3136},
                "videos_kwargs": {"fps": 2},
                "nested": [1, None, "x", {"k": (2, 3)}],
            },
        },
    ]


def test_image_hashes_match_vllm() -> None:
    cases = _cases()
    wire = [{**case, "data": base64.b64encode(case["data"]).decode()} for case in cases]
    reference = run_ref_script(_REF_SCRIPT, wire)
    ours = [
        hash_image(
            decode_image(case["data"], max_image_pixels=10**8),
            model_id=case["model_id"],
            algorithm=case["algorithm"],
            # JSON turns tuples into lists on the ref side; do the same here.
            media_io_kwargs=json.loads(json.dumps(case["media_io_kwargs"])),
            mm_processor_kwargs=json.loads(json.dumps(case["mm_processor_kwargs"])),
        )
        for case in cases
    ]
    assert ours == reference
    assert len(set(reference)) == len(reference)  # the cases really differ
