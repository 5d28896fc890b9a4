"""render_service.mm.media vs vLLM 0.33's own loader (`ImageMediaIO.load_bytes`) in the ref venv.

For each encoded image both sides must agree on: accepted or refused, and when accepted the
decoded RGB pixels, the size, and the `io_config` that vLLM feeds into `mm_hash`. One ref
subprocess handles every case (importing vLLM takes seconds).
"""

from __future__ import annotations

import base64
import hashlib
from io import BytesIO

from PIL import Image

from render_service.errors import BadRequestError
from render_service.mm.media import decode_image

from .ref import run_ref_script

_REF_SCRIPT = r"""
import base64, hashlib, json, sys
from vllm.multimodal.media.image import ImageMediaIO
io = ImageMediaIO()
out = []
for b64 in json.load(sys.stdin):
    try:
        loaded = io.load_bytes(base64.b64decode(b64))
    except ValueError as exc:
        out.append({"error": str(exc)})
        continue
    image = loaded.media
    cfg = loaded.io_config
    out.append({"mode": image.mode, "size": list(image.size),
                "sha256": hashlib.sha256(image.tobytes()).hexdigest(),
                "io_config": None if cfg is None else {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}})
print(json.dumps(out))
"""


def _encode(image: Image.Image, fmt: str, **kwargs: object) -> bytes:
    buffer = BytesIO()
    image.save(buffer, fmt, **kwargs)
    return buffer.getvalue()


def _cases() -> dict[str, bytes]:
    rgb = Image.new("RGB", (23, 11))
    rgb.putdata(
        [((x * 11) % 256, (y * 23) % 256, (x + y) % 256) for y in range(11) for x in range(23)]
    )
    rgba = rgb.convert("RGBA")
    rgba.putalpha(Image.linear_gradient("L").resize((23, 11)))
    palette_transparent = rgb.convert("P")
    palette_transparent.info["transparency"] = 0
    exif = Image.Exif()
    exif[0x0112] = 8
    png = _encode(rgb, "PNG")
    return {
        "png_rgb": png,
        "jpeg_rgb": _encode(rgb, "JPEG", quality=85),
        "jpeg_exif_rotated": _encode(rgb, "JPEG", exif=exif),
        "png_rgba": _encode(rgba, "PNG"),
        "png_gray": _encode(rgb.convert("L"), "PNG"),
        "png_palette_transparent": _encode(palette_transparent, "PNG", transparency=0),
        "gif": _encode(rgb.convert("P"), "GIF"),
        "webp": _encode(rgb, "WEBP", lossless=True),
        "bmp": _encode(rgb, "BMP"),
        "tiff_cmyk": _encode(rgb.convert("CMYK"), "TIFF"),
        "truncated_png": png[: len(png) // 2],
        "not_an_image": b"hello world",
        "eps": _encode(rgb, "EPS"),
    }


def _ours(data: bytes) -> dict[str, object]:
    try:
        loaded = decode_image(data, max_image_pixels=178_956_970)  # vLLM's default limit
    except BadRequestError as exc:
        return {"error": exc.message}
    cfg = loaded.io_config
    return {
        "mode": loaded.image.mode,
        "size": list(loaded.image.size),
        "sha256": hashlib.sha256(loaded.image.tobytes()).hexdigest(),
        "io_config": None
        if cfg is None
        else {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
    }


def test_decoding_matches_vllm_image_media_io() -> None:
    cases = _cases()
    reference = run_ref_script(_REF_SCRIPT, [base64.b64encode(data).decode() for data in cases.values()])
    for (name, data), ref in zip(cases.items(), reference, strict=True):
        ours = _ours(data)
        if "error" in ref:
            assert "error" in ours, f"{name}: vLLM refused ({ref['error']}) but we accepted"
        else:
            assert ours == ref, name
    # The corpus must exercise both outcomes, or the comparison proves little.
    assert sum("error" in ref for ref in reference) == 3
