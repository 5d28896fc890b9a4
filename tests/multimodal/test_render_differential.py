"""Our image chat render vs `vllm launch render` 0.33 on a tiny Qwen2-VL folder, whole bodies.

One reference server (torchvision stub, blake3 hashing, trusted request kwargs and templates,
an allowed media folder) and our in-process `Renderer` on the same folder answer the same
requests. Everything must be equal: status, token_ids, placeholders, hashes and every other
GenerateRequest field; the base64 tensor items are compared after decoding with vLLM's own
decoder (vLLM's item key order follows set iteration, so bytes may differ).
"""

from __future__ import annotations

import copy
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from render_service.api import Renderer
from render_service.config import ServiceConfig
from render_service.errors import RenderServiceError

from .ref import items_equal_in_vllm, start_ref_render
from .tiny_vlm import build_qwen2_vl_dir, data_uri, png

SERVED = "Qwen/Qwen3-8B"  # the name RefRenderServer serves
TRUST = ("--trust-request-mm-kwargs", "--trust-request-chat-template")
# A "string"-format template (content is one string), for vLLM's placeholder-in-front rule.
STRING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"


def _encoded(mode: str, size: tuple[int, int], fmt: str, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    image = Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)
    buffer = BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def _image(url: str, **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}, **extra}


def _user(*parts: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(parts)}


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("media")
    (folder / "photo.jpg").write_bytes(_encoded("RGB", (77, 50), "JPEG", 9))
    return folder


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, media_dir: Path):
    model_dir = build_qwen2_vl_dir(tmp_path_factory.mktemp("tiny-qwen2-vl"))
    flags = (*TRUST, "--allowed-local-media-path", str(media_dir))
    server = start_ref_render(model_dir, flags, tmp_path_factory.mktemp("logs"))
    config = ServiceConfig(
        model=str(model_dir),
        served_model_name=(SERVED,),
        trust_request_mm_kwargs=True,
        trust_request_chat_template=True,
        allowed_local_media_path=str(media_dir),
    )
    try:
        yield server, Renderer(config)
    finally:
        server.stop()


def _cases(media_dir: Path) -> dict[str, dict[str, Any]]:
    a, b, c = png((90, 60), 1), png((300, 41), 2), png((64, 64), 3)
    rgba = data_uri(_encoded("RGBA", (50, 70), "PNG", 4))
    gray = data_uri(_encoded("L", (40, 40), "PNG", 5))
    jpeg = data_uri(_encoded("RGB", (120, 33), "JPEG", 6), "image/jpeg")
    text = {"type": "text", "text": "Compare these."}
    return {
        "three_images": {"messages": [_user(text, _image(data_uri(a)), _image(data_uri(b)), _image(data_uri(c)))]},
        "modes_and_formats": {"messages": [_user(_image(rgba), text, _image(gray), _image(jpeg))], "max_tokens": 9},
        "multi_turn": {
            "messages": [
                _user(_image(data_uri(a)), text),
                {"role": "assistant", "content": "A cat."},
                _user({"type": "text", "text": "And this?"}, _image(data_uri(b))),
            ],
            "temperature": 0.5,
        },
        "payload_none": {"messages": [_user(text, _image(data_uri(a)))], "mm_payload": "none"},
        "return_mm_kwargs_false": {"messages": [_user(text, _image(data_uri(b)))], "return_mm_kwargs": False},
        "uuid": {"messages": [_user(_image(data_uri(a), uuid="img-1"), _image(data_uri(b)))]},
        "uuid_with_kwargs": {
            "messages": [_user(_image(data_uri(a), uuid="img-1"))],
            "mm_processor_kwargs": {"max_pixels": 28 * 28 * 16},
        },
        "processor_kwargs": {"messages": [_user(_image(data_uri(b)))], "mm_processor_kwargs": {"max_pixels": 28 * 28 * 8}},
        "media_io_kwargs": {
            "messages": [_user(_image(rgba))],
            "media_io_kwargs": {"image": {"rgba_background_color": [0, 0, 0]}},
        },
        "local_file": {"messages": [_user(_image((media_dir / "photo.jpg").as_uri()), text)]},
        "input_image_and_untyped": {
            "messages": [
                _user(
                    {"type": "input_image", "image_url": data_uri(a), "detail": "low"},
                    {"image_url": {"url": data_uri(c)}},
                    {"image_url": data_uri(b)},
                )
            ]
        },
        "input_image_without_detail": {"messages": [_user({"type": "input_image", "image_url": data_uri(a)})]},
        "image_url_as_string": {"messages": [_user({"type": "image_url", "image_url": data_uri(a)})]},
        "detail_high": {"messages": [_user(_image(data_uri(a)) | {"image_url": {"url": data_uri(a), "detail": "high"}})]},
        "extra_fields": {"messages": [_user({"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}, _image(data_uri(a)))]},
        "string_template": {"messages": [_user(text, _image(data_uri(a)), _image(data_uri(b)))], "chat_template": STRING_TEMPLATE},
        "string_template_typed_placeholder": {
            "messages": [_user({"type": "text", "text": f"first {PLACEHOLDER} then"}, _image(data_uri(a)), _image(data_uri(b)))],
            "chat_template": STRING_TEMPLATE,
        },
        "string_template_too_many_placeholders": {
            "messages": [_user({"type": "text", "text": PLACEHOLDER * 2}, _image(data_uri(a)))],
            "chat_template": STRING_TEMPLATE,
        },
        "bad_base64": {"messages": [_user(_image("data:image/png;base64,!!!"))]},
        "not_an_image": {"messages": [_user(_image(data_uri(b"plain text", "text/plain")))]},
        "file_outside_folder": {"messages": [_user(_image("file:///etc/hostname"))]},
        "offsets": {"messages": [_user(text, _image(data_uri(a)))], "return_token_offsets": True},
    }


def _ours(renderer: Renderer, body: dict[str, Any]) -> tuple[int, Any]:
    try:
        return 200, renderer.render_chat(copy.deepcopy(body), request_id_header="mm-diff")
    except RenderServiceError as exc:
        return exc.status, exc.to_body()


def test_image_chat_render_equals_vllm(pair, media_dir: Path) -> None:
    server, renderer = pair
    pairs: list[tuple[str | None, str | None]] = []
    labels: list[str] = []
    ok_cases = 0
    for name, body in _cases(media_dir).items():
        response = server.post("/v1/chat/completions/render", copy.deepcopy(body), headers={"X-Request-Id": "mm-diff"})
        status, got = _ours(renderer, body)
        assert status == response.status_code, (name, response.text[:1500], got)
        expected = response.json()
        if status != 200:
            assert got["error"]["code"] == expected["error"]["code"], name
            continue
        ok_cases += 1
        got.pop("render_fingerprint")
        ours_features, ref_features = got.pop("features"), expected.pop("features")
        assert got == expected, name
        assert list(got) == list(expected), name
        for key in ("mm_hashes", "mm_placeholders"):
            assert ours_features[key] == ref_features[key], (name, key)
        for key in ("kwargs_data", "mm_metadata"):
            if ref_features[key] is None or ours_features[key] is None:
                assert ours_features[key] == ref_features[key], (name, key)
                continue
            assert len(ours_features[key]["image"]) == len(ref_features[key]["image"]), (name, key)
            pairs += list(zip(ours_features[key]["image"], ref_features[key]["image"]))
            labels += [f"{name}:{key}"] * len(ref_features[key]["image"])
    assert ok_cases >= 14  # the corpus must mostly succeed, or equality proves little
    equal = items_equal_in_vllm(pairs)
    assert [label for label, same in zip(labels, equal) if not same] == []
