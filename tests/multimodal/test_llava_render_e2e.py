"""LlavaFamily vs vLLM 0.33 (`LlavaForConditionalGeneration`), on a tiny weightless LLaVA folder.

- Differential, one `vllm launch render` (torchvision stub, sha256 hashing) for the module:
  chat requests with text and three data-URI images of different sizes and modes (RGB PNG,
  RGBA PNG composited on white, grayscale JPEG), with default and request processor kwargs.
  We recompute the whole `features` object and the expanded token ids with our modules
  (media, hashing, LlavaFamily, features, serde); kwargs items are compared after decoding with
  vLLM's own decoder (its item key order follows set iteration).
- Differential without the server: the placeholder count vLLM derives from assorted vision
  configs (CLIP/SigLIP, select strategies, llava-1.5's 336/14) vs ours.
- Fast unit tests of the family's layout and refusals.
"""

from __future__ import annotations

import json
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from transformers import AutoTokenizer

from render_service.errors import BadRequestError, ConfigError
from render_service.mm.family import metadata_item
from render_service.mm.features import build_features, expand_placeholders
from render_service.mm.hashing import hash_image
from render_service.mm.llava import ARCHITECTURES, LlavaFamily
from render_service.mm.media import decode_image
from render_service.mm.serde import BatchedField, BFloat16Tensor

from .ref import items_equal_in_vllm, run_ref_script, start_ref_render
from .tiny_vlm import LLAVA_CONFIG, build_llava_dir, data_uri, png

MAX_PIXELS = 10**8


def _rgba_png(size: tuple[int, int], seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size[1], size[0], 4), dtype=np.uint8)
    buffer = BytesIO()
    Image.fromarray(pixels, "RGBA").save(buffer, "PNG")
    return buffer.getvalue()


def _gray_jpeg(size: tuple[int, int], seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size[1], size[0]), dtype=np.uint8)
    buffer = BytesIO()
    Image.fromarray(pixels, "L").save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


IMAGES = [
    (png((90, 60), 1), "image/png"),
    (_rgba_png((30, 200), 2), "image/png"),
    (_gray_jpeg((64, 64), 3), "image/jpeg"),
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_llava_dir(tmp_path_factory.mktemp("tiny-llava"))


@pytest.fixture(scope="module")
def family(model_dir: Path) -> LlavaFamily:
    return LlavaFamily(model_dir, json.loads((model_dir / "config.json").read_text()))


@pytest.fixture(scope="module")
def ref_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    # sha256: the project venv has no `blake3` (vLLM's default; same framing).
    flags = ("--mm-hasher-algorithm", "sha256", "--trust-request-mm-kwargs")
    server = start_ref_render(model_dir, flags, tmp_path_factory.mktemp("logs"))
    try:
        yield server
    finally:
        server.stop()


def _parts(images: list[tuple[bytes, str]]) -> list[dict[str, Any]]:
    """Text, then images, with text between the first two images."""
    urls = [
        {"type": "image_url", "image_url": {"url": data_uri(data, mime)}} for data, mime in images
    ]
    return [
        {"type": "text", "text": "Compare these"},
        urls[0],
        {"type": "text", "text": "with"},
        *urls[1:],
    ]


def _template_ids(model_dir: Path, parts: list[dict[str, Any]]) -> list[int]:
    """The template's token ids before expansion (vLLM passes image parts as {"type": "image"})."""
    content = [{"type": "image"} if part["type"] == "image_url" else part for part in parts]
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer.encode(rendered, add_special_tokens=False)


def _our_render(
    family: LlavaFamily,
    model_dir: Path,
    parts: list[dict[str, Any]],
    processor_kwargs: dict[str, Any],
) -> tuple[list[int], dict[str, Any]]:
    loaded = [decode_image(data, max_image_pixels=MAX_PIXELS) for data, _ in IMAGES]
    hashes = [
        hash_image(
            item, model_id=str(model_dir), algorithm="sha256", mm_processor_kwargs=processor_kwargs
        )
        for item in loaded
    ]
    processed = [family.process(item.image, processor_kwargs) for item in loaded]
    ids, ranges = expand_placeholders(
        _template_ids(model_dir, parts),
        family.image_token_id,
        [family.replacement(p) for p in processed],
    )
    # vLLM resolves the tiny folder (no dtype in config.json) to bfloat16 on CPU.
    items = family.kwargs_items(processed, "bfloat16")
    return ids, build_features(hashes, ranges, items, family.metadata_keys)


def test_features_match_vllm_render(ref_server, family: LlavaFamily, model_dir: Path) -> None:
    parts = _parts(IMAGES)
    # Default processing, then request kwargs: LLaVA has no device normalisation, so vLLM
    # honours `do_normalize: false` (it would force it off for Qwen2-VL).
    cases = [{}, {"do_normalize": False}]
    item_pairs: list[tuple[str | None, str | None]] = []
    for processor_kwargs in cases:
        body: dict[str, Any] = {"messages": [{"role": "user", "content": parts}], "max_tokens": 4}
        if processor_kwargs:
            body["mm_processor_kwargs"] = processor_kwargs
        response = ref_server.post("/v1/chat/completions/render", body)
        assert response.status_code == 200, response.text[:2000]
        ref = response.json()
        ids, features = _our_render(family, model_dir, parts, processor_kwargs)

        assert ids == ref["token_ids"]
        ref_features = ref["features"]
        assert features["mm_hashes"] == ref_features["mm_hashes"]
        assert features["mm_placeholders"] == ref_features["mm_placeholders"]
        assert features["mm_metadata"] is None and ref_features["mm_metadata"] is None
        assert len(ref_features["kwargs_data"]["image"]) == len(IMAGES)
        item_pairs += zip(
            features["kwargs_data"]["image"], ref_features["kwargs_data"]["image"], strict=True
        )
    assert items_equal_in_vllm(item_pairs) == [True] * len(item_pairs)


# The placeholder count vLLM's LLaVA processing info computes from the config alone.
_VLLM_COUNTS_SCRIPT = r"""
import json, sys
from transformers import LlavaConfig
from vllm.model_executor.models.vision import get_num_selected_vision_tokens, get_vision_encoder_info
counts = []
for config in json.load(sys.stdin):
    hf_config = LlavaConfig.from_dict(config)
    info = get_vision_encoder_info(hf_config)
    size = info.get_image_size()
    tokens = info.get_num_image_tokens(image_width=size, image_height=size)
    counts.append(get_num_selected_vision_tokens(tokens, hf_config.vision_feature_select_strategy))
print(json.dumps(counts))
"""


def _config_variant(vision: dict[str, Any] | None, strategy: str | None) -> dict[str, Any]:
    config = {key: value for key, value in LLAVA_CONFIG.items() if key != "vision_config"}
    if vision is not None:
        config["vision_config"] = vision
    if strategy is not None:
        config["vision_feature_select_strategy"] = strategy
    return config


CONFIG_VARIANTS = [
    _config_variant(LLAVA_CONFIG["vision_config"], None),
    _config_variant(LLAVA_CONFIG["vision_config"], "full"),
    _config_variant(None, None),  # transformers' default tower: llava-1.5's CLIP 336/14
    _config_variant(
        {"model_type": "clip_vision_model", "image_size": 336, "patch_size": 14}, "full"
    ),
    _config_variant(
        {"model_type": "siglip_vision_model", "image_size": 384, "patch_size": 14}, "default"
    ),
    _config_variant(
        {"model_type": "siglip_vision_model", "image_size": 224, "patch_size": 16}, "full"
    ),
]


def test_placeholder_count_matches_vllm_for_vision_configs(model_dir: Path) -> None:
    ours = [LlavaFamily(model_dir, config).num_image_tokens for config in CONFIG_VARIANTS]
    assert ours == run_ref_script(_VLLM_COUNTS_SCRIPT, CONFIG_VARIANTS, stub=True)


# --- fast unit tests (no vLLM) ---------------------------------------------------------------


def test_serves_the_llava_architecture() -> None:
    assert ARCHITECTURES == frozenset(LLAVA_CONFIG["architectures"])


def test_process_crops_to_the_tower_input(family: LlavaFamily) -> None:
    size = LLAVA_CONFIG["vision_config"]["image_size"]
    for width, height in ((90, 60), (30, 200), (size, size)):
        item = family.process(Image.new("RGB", (width, height), (10, 200, 30)), {})
        pixels = item.tensors["pixel_values"]
        assert set(item.tensors) == {"pixel_values"}
        assert pixels.shape == (3, size, size) and pixels.dtype == np.float32
        patches = (size // LLAVA_CONFIG["vision_config"]["patch_size"]) ** 2
        assert item.num_tokens == patches  # CLIP's CLS token is dropped by the "default" strategy
        assert family.replacement(item) == [family.image_token_id] * patches


def test_normalises_on_cpu_even_when_device_normalize_is_requested(model_dir: Path) -> None:
    """vLLM forces `mm_device_do_normalize` off for LLaVA: pixels are always normalised here."""
    config = json.loads((model_dir / "config.json").read_text())
    image = Image.new("RGB", (40, 40), (0, 0, 0))
    device = LlavaFamily(model_dir, config, device_normalize=True).process(image, {})
    host = LlavaFamily(model_dir, config, device_normalize=False).process(image, {})
    raw = LlavaFamily(model_dir, config).process(image, {"do_normalize": False})
    np.testing.assert_array_equal(device.tensors["pixel_values"], host.tensors["pixel_values"])
    assert (device.tensors["pixel_values"] < 0).all()  # black minus the CLIP mean
    assert (raw.tensors["pixel_values"] == 0).all()


def test_kwargs_items_are_batched_without_metadata(family: LlavaFamily) -> None:
    images = [Image.new("RGB", (50, 70), (i * 40, 0, 255 - i * 40)) for i in range(3)]
    processed = [family.process(image, {}) for image in images]
    items = family.kwargs_items(processed, "bfloat16")
    assert [set(item) for item in items] == [{"pixel_values"}] * 3
    for item, source in zip(items, processed, strict=True):
        elem = item["pixel_values"]
        assert elem.field == BatchedField(keep_on_cpu=False)
        assert isinstance(elem.data, BFloat16Tensor)
        assert elem.data.bits.shape == source.tensors["pixel_values"].shape
        assert metadata_item(item, family.metadata_keys) is None
    assert family.kwargs_items(processed, "float32")[0]["pixel_values"].data.dtype == np.float32
    assert family.placeholder == "<image>" and family.metadata_keys == frozenset()


def test_bad_processor_kwargs_are_a_bad_request(family: LlavaFamily) -> None:
    with pytest.raises(BadRequestError, match="Image preprocessing failed"):
        family.process(Image.new("RGB", (20, 20)), {"size": {"longest_side": 3}})


@pytest.mark.parametrize(
    "vision",
    [
        # Pixtral-HF (another processor); a CLIP size vLLM's encoder info asserts against.
        {"model_type": "pixtral", "image_size": 1024, "patch_size": 16},
        {"model_type": "clip_vision_model", "image_size": 50, "patch_size": 14},
    ],
)
def test_unsupported_vision_towers_are_config_errors(
    model_dir: Path, vision: dict[str, Any]
) -> None:
    with pytest.raises(ConfigError):
        LlavaFamily(model_dir, _config_variant(vision, None))


def test_invalid_select_strategy_is_a_config_error(model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="vision_feature_select_strategy"):
        LlavaFamily(model_dir, _config_variant(LLAVA_CONFIG["vision_config"], "class"))


def test_missing_processor_config_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        LlavaFamily(tmp_path, LLAVA_CONFIG)
