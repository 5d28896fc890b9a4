"""Fixtures for derender tests: one embedded-Qwen3 Derenderer per server configuration.

Loading the tokenizer takes seconds, so the ModelBundle is loaded once per session and every
configuration shares it (a ModelBundle is immutable; only parser flags and secrets differ).

`ref_parsed` is the one vLLM 0.33 reference server (`vllm launch render` with the qwen3 and
hermes parsers) that every differential module shares: package scoped, so it starts at most
once per run, only when a differential test asks for it, and stops when the last test of
tests/derender is done (not at the end of the whole session).
"""

from __future__ import annotations

import pytest

from render_service.config import ServiceConfig  # noqa: E402
from render_service.derender_api import Derenderer  # noqa: E402
from render_service.model import ModelBundle  # noqa: E402

from ..harness.paths import generated_dir  # noqa: E402
from ..render.ref_server import PARSER_FLAGS as REF_FLAGS  # noqa: E402
from ..render.ref_server import RefRenderServer, build_render_model_dir  # noqa: E402

SECRET = "test-secret"
PARSER_FLAGS = {
    "reasoning_parser": "qwen3",
    "tool_call_parser": "hermes",
    "enable_auto_tool_choice": True,
}


class _BundleRenderer:
    """The part of `render_service.api.Renderer` Derenderer reads."""

    def __init__(self, bundle: ModelBundle) -> None:
        self.bundle = bundle


@pytest.fixture(scope="session")
def bundle() -> ModelBundle:
    return ModelBundle.load(ServiceConfig(stream_state_secret=SECRET))


@pytest.fixture(scope="session")
def make_derenderer(bundle):  # noqa: ANN001, ANN201
    cache: dict[tuple, Derenderer] = {}

    def make(**overrides) -> Derenderer:  # noqa: ANN003
        key = tuple(sorted((k, repr(v)) for k, v in overrides.items()))
        if key not in cache:
            config = ServiceConfig(stream_state_secret=SECRET, **overrides)
            cache[key] = Derenderer(config, _BundleRenderer(bundle))
        return cache[key]

    return make


@pytest.fixture(scope="session")
def plain(make_derenderer) -> Derenderer:  # noqa: ANN001
    return make_derenderer()


@pytest.fixture(scope="session")
def tok(bundle):  # noqa: ANN001, ANN201
    return bundle.hf_tokenizer


@pytest.fixture(scope="package")
def ref_parsed():  # noqa: ANN201
    """vLLM 0.33's `vllm launch render` on a weightless Qwen3 folder, with our parser flags."""
    model_dir = build_render_model_dir(generated_dir("derender-ref-model"))
    log_dir = generated_dir("derender-ref-logs")
    log_dir.mkdir(parents=True, exist_ok=True)
    with RefRenderServer(model_dir, REF_FLAGS, log_dir) as server:
        yield server
