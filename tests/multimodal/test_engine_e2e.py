"""Our image render output, fed to a real vLLM 0.32 CPU engine serving the same tiny Qwen2-VL.

The `GenerateRequest` comes from the in-process `Renderer` (chat with two data-URI images) and
is POSTed unchanged to the engine's `/inference/v1/generate` (greedy, 4 tokens, top-5
logprobs). The engine (`harness.fixtures.vision_engine`) has real random weights for the folder
our renderer reads, runs the vision tower on the `pixel_values` we send, and is started with
`--enable-scale-out`, not `--tokens-only`: vLLM refuses `--tokens-only` for Qwen2-VL, whose
multimodal processor needs the tokenizer that flag skips (harness/engines.py::vision_spec).

Why these assertions fail when the engine does not use our features:
- `test_engine_accepts_our_features`: the engine decodes every item (a bad item is a 500), and
  echoes the prompt it scheduled: its ids and placeholder ranges must be ours.
- `test_pixels_change_the_output`: a second request differs from the first only in the pixels
  of one image (same size: same token ids, placeholders and grid; only kwargs and hashes
  differ). An engine that ignored `pixel_values` (or `features` altogether) would see two
  identical prompts and give identical greedy tokens and logprobs. Deterministic: weights and
  images are seeded; the hashes differ, so no cache can serve the second from the first.
- `test_float32_pixels_match_bfloat16`: render sends `pixel_values` in the model dtype
  (bfloat16 for this folder, as vLLM 0.33 render does). The same images rendered as float32
  must give exactly the same output: the values are raw 0..255 pixels (the engine normalises
  on the device, in float32, whatever the input dtype), which bfloat16 holds exactly. The
  float32 request names its images with client `uuid`s, so the engine cannot reuse the
  bfloat16 request's cached encoder output (its cache is keyed by mm_hash): the vision tower
  really runs on the float32 tensors. This is also the determinism control for the test above.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from render_service.api import Renderer
from render_service.config import ServiceConfig

from ..harness.engine_api import generate
from ..harness.fixtures import VisionEngine, vision_engine  # noqa: F401
from .tiny_vlm import IMAGE_PAD, data_uri, png

pytestmark = pytest.mark.engine

FIRST = png((90, 60), 1)  # 4 x 6 patches of 14 px after resizing: 6 image tokens
SECOND = png((64, 64), 2)  # 4 x 4 patches: 4 image tokens
SECOND_OTHER_PIXELS = png((64, 64), 3)
RenderedAndAnswer = tuple[dict[str, Any], dict[str, Any]]  # our GenerateRequest, engine response


def chat_body(images: list[bytes], uuids: list[str] | None = None) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": "Compare these."}]
    for index, image in enumerate(images):
        part: dict[str, Any] = {"type": "image_url", "image_url": {"url": data_uri(image)}}
        if uuids is not None:
            part["uuid"] = uuids[index]
        parts.append(part)
    return {
        "messages": [{"role": "user", "content": parts}],
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
    }


def tensor_dtypes(features: dict[str, Any]) -> list[set[str]]:
    """Per image item, which float dtype names its msgpack holds (as fixstr: 0xa0 + length)."""
    items = [base64.b64decode(item) for item in features["kwargs_data"]["image"]]
    names = ("bfloat16", "float32")
    return [
        {name for name in names if bytes([0xA0 + len(name)]) + name.encode() in raw}
        for raw in items
    ]


def greedy_output(response: dict[str, Any]) -> tuple[list[int], list[Any]]:
    """Generated ids plus every logprob the engine returned (sampled token and top 5)."""
    choice = response["choices"][0]
    steps = [
        (
            step["token_id"],
            step["logprob"],
            [(t["token_id"], t["logprob"]) for t in step["top_logprobs"]],
        )
        for step in choice["logprobs"]["content"]
    ]
    return choice["token_ids"], steps


def run(engine: VisionEngine, rendered: dict[str, Any]) -> dict[str, Any]:
    return generate(engine.url, {**rendered, "return_token_ids": True}, timeout=120)


@pytest.fixture(scope="module")
def renderer(vision_engine: VisionEngine) -> Renderer:  # noqa: F811
    return Renderer(ServiceConfig(model=str(vision_engine.model_dir)))


@pytest.fixture(scope="module")
def first(vision_engine: VisionEngine, renderer: Renderer) -> RenderedAndAnswer:  # noqa: F811
    rendered = renderer.render_chat(chat_body([FIRST, SECOND]))
    return rendered, run(vision_engine, rendered)


def test_engine_accepts_our_features(first: RenderedAndAnswer) -> None:
    rendered, response = first
    features = rendered["features"]
    assert tensor_dtypes(features) == [{"bfloat16"}] * 2
    for span in features["mm_placeholders"]["image"]:
        pads = rendered["token_ids"][span["offset"] : span["offset"] + span["length"]]
        assert pads == [IMAGE_PAD] * span["length"]

    token_ids, steps = greedy_output(response)
    assert len(token_ids) == 4 and len(steps) == 4
    assert response["usage"]["prompt_tokens"] == len(rendered["token_ids"])
    assert response["prompt_token_ids"] == rendered["token_ids"]
    assert response["mm_placeholders"] == features["mm_placeholders"]


def test_pixels_change_the_output(
    vision_engine: VisionEngine,  # noqa: F811
    renderer: Renderer,
    first: RenderedAndAnswer,
) -> None:
    rendered, response = first
    other = renderer.render_chat(chat_body([FIRST, SECOND_OTHER_PIXELS]))
    ours, theirs = rendered["features"], other["features"]
    assert other["token_ids"] == rendered["token_ids"]
    assert theirs["mm_placeholders"] == ours["mm_placeholders"]
    assert theirs["mm_metadata"] == ours["mm_metadata"]  # the same grids
    first_kwargs, second_kwargs = ours["kwargs_data"]["image"]
    assert theirs["kwargs_data"]["image"][0] == first_kwargs
    assert theirs["kwargs_data"]["image"][1] != second_kwargs

    assert greedy_output(run(vision_engine, other)) != greedy_output(response)


def test_float32_pixels_match_bfloat16(
    vision_engine: VisionEngine,  # noqa: F811
    first: RenderedAndAnswer,
) -> None:
    rendered, response = first
    float32 = Renderer(ServiceConfig(model=str(vision_engine.model_dir), dtype="float32"))
    uuids = ["e2e-float32-0", "e2e-float32-1"]
    as_float32 = float32.render_chat(chat_body([FIRST, SECOND], uuids=uuids))
    assert as_float32["features"]["mm_hashes"]["image"] == uuids
    assert tensor_dtypes(as_float32["features"]) == [{"float32"}] * 2
    assert as_float32["token_ids"] == rendered["token_ids"]

    assert greedy_output(run(vision_engine, as_float32)) == greedy_output(response)
