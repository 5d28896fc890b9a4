"""The `vllm serve` parity engine, shared by the parity modules of this package.

ONE vLLM 0.32 CPU engine, started with `--enable-scale-out` (not `--tokens-only`), serves
vLLM's own OpenAI and Anthropic routes (with `--reasoning-parser qwen3 --tool-call-parser hermes
--enable-auto-tool-choice`, so vLLM itself splits reasoning and tool calls) and
`/inference/v1/generate`; an in-process gateway points at that same engine
(tests/service/test_gateway_serve_parity.py, "Theory of operation"). Package scope: it starts
once for every parity module and stops when tests/service ends, after tests/harness has
stopped the shared engines (tests/conftest.py), so it never runs next to them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from render_service.gateway.codec import InProcessCodec
from render_service.gateway.config import HealthSettings
from tests.gateway.e2e_support import RunningGateway, Scripts, running, service_config
from tests.harness.engines import EngineFleet, EngineSpec, free_port
from tests.harness.paths import HARNESS_DIR

MODEL = "tiny-qwen3"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
STEP_PACE_MS = 30
HTTP_TIMEOUT_S = 120.0

# Loaded by the engine next to scripted_logits: sleeps per engine step, so the API server
# ships every step's output on its own (module docstring, "Stream chunking").
_STEP_PACE_SOURCE = '''
import os
import time

from vllm.v1.sample.logits_processor import LogitsProcessor


class StepPace(LogitsProcessor):
    def __init__(self, vllm_config, device, is_pin_memory):
        self.seconds = float(os.environ["RS_STEP_PACE_MS"]) / 1000.0

    def is_argmax_invariant(self):
        return False  # else vLLM skips it for greedy requests

    def update_state(self, batch_update):
        return None

    def apply(self, logits):
        time.sleep(self.seconds)
        return logits
'''


@pytest.fixture(scope="package")
def serve_engine(engine_fleet: EngineFleet, tiny_model_dir: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One `vllm serve --enable-scale-out` engine: OpenAI routes AND /inference/v1/generate."""
    plugins = tmp_path_factory.mktemp("engine-plugins")
    (plugins / "step_pace.py").write_text(_STEP_PACE_SOURCE)
    spec = EngineSpec(
        name="serve-parity", model_dir=tiny_model_dir, port=free_port(), tokens_only=False,
        scripted=False,  # both processors are listed below
        extra_args=("--served-model-name", MODEL, "--reasoning-parser", "qwen3",
                    "--tool-call-parser", "hermes", "--enable-auto-tool-choice",
                    "--logits-processors", "scripted_logits:ScriptedLogits",
                    "step_pace:StepPace"),
        extra_env=(("PYTHONPATH", f"{HARNESS_DIR}{os.pathsep}{plugins}"),
                   ("RS_STEP_PACE_MS", str(STEP_PACE_MS))))
    engine = engine_fleet.launch(spec)
    try:
        engine.wait_healthy()
        _warm_up(engine.url)
        yield engine.url
    finally:
        engine.stop()


def _warm_up(url: str) -> None:
    """A fresh API server's first logprobs requests were slow enough that their next steps
    arrived merged (observed); pay that once, outside the compared requests."""
    with httpx.Client(timeout=HTTP_TIMEOUT_S) as client:
        for path, body in ((CHAT, {"messages": [{"role": "user", "content": "hi"}],
                                   "logprobs": True, "top_logprobs": 2}),
                           (COMPLETIONS, {"prompt": "hi", "logprobs": 2})):
            response = client.post(url + path, json={"model": MODEL, "max_tokens": 4, **body})
            assert response.status_code == 200, response.text


@pytest.fixture(scope="package")
def parity_gateway(serve_engine: str, tiny_model_dir: Path) -> Iterator[RunningGateway]:
    config = service_config(tiny_model_dir)
    # Generous health checks: a busy 2-core machine must not take the only engine out.
    health = HealthSettings(interval_s=5.0, timeout_s=10.0, failure_threshold=3)
    with running(config, InProcessCodec(config), engines=(serve_engine,), health=health) as gw:
        yield gw


@pytest.fixture(scope="package")
def parity_scripts(tiny_model_dir: Path) -> Scripts:
    return Scripts(tiny_model_dir)
