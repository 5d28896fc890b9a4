"""Session-scoped pytest fixtures for real vLLM CPU engines.

Import them into a conftest.py (they are plain fixtures, not a plugin):
    from tests.harness.fixtures import engine_fleet, pd_engines, tiny_model_dir, tokens_engine

- `tiny_model_dir` -> Path of the cached tiny Qwen3 folder (built once).
- `tokens_engine`  -> base URL of one collocated tokens-only engine (scripted logits loaded).
- `pd_engines`     -> PDEngines(prefill_url, decode_url, decode_log): a NIXL prefill/decode pair.
- `vision_engine`  -> VisionEngine(url, model_dir, log_path): one engine serving the tiny random
                      Qwen2-VL of tiny_vlm_model.py (images arrive as GenerateRequest `features`);
                      module-scoped: it boots on its own when its module starts (booting it
                      with three others on 2 cores took over the 300 s health bound) and stops
                      when the module ends (3.7 GiB).
- `engine_fleet`   -> the session's EngineFleet, to start private engines (e.g. one a failure
                      test kills) with fleet.launch(spec).wait_healthy(); stopped at session end.

Engines start lazily, on the first test that needs one. That first request starts EVERY
engine some selected test needs (tokens and/or P/D), so they boot in parallel; each fixture
then waits only for its own engines. The fleet lives on the pytest config object, not in a
module global, so it stays one per session even if this module is imported under two names
(`harness.fixtures` and `tests.harness.fixtures`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from .engines import (
    EngineFleet,
    EnginePortTaken,
    EngineProcess,
    EngineSpec,
    pd_specs,
    tokens_only_spec,
    vision_spec,
)
from .tiny_model import tiny_qwen3_dir
from .tiny_vlm_model import tiny_qwen2_vl_dir

_FLEET_ATTR = "_render_service_engine_fleet"
TOKENS = "tokens_engine"
PD = "pd_engines"
KINDS = (TOKENS, PD)  # booted together; the vision engine boots alone (see vision_engine)


class PDEngines(NamedTuple):
    prefill_url: str
    decode_url: str
    decode_log: Path


class VisionEngine(NamedTuple):
    url: str
    model_dir: Path  # what to render for (same tokenizer, template and processor config)
    log_path: Path


def _specs_for(kind: str) -> list[EngineSpec]:
    if kind == TOKENS:
        return [tokens_only_spec(tiny_qwen3_dir())]
    return list(pd_specs(tiny_qwen3_dir()))


class _SessionEngines:
    """The fleet plus which named engines are launched."""

    def __init__(self) -> None:
        self.fleet = EngineFleet()
        self.by_kind: dict[str, list[EngineProcess]] = {}

    def launch_needed(self, kinds: set[str]) -> None:
        for kind in sorted(kinds - self.by_kind.keys()):
            self.by_kind[kind] = self.fleet.launch_all(_specs_for(kind))

    def healthy(self, kind: str) -> list[EngineProcess]:
        try:
            return self._wait(kind)
        except EnginePortTaken:  # lost a race for a port: one relaunch on fresh ports
            for engine in self.by_kind.pop(kind):
                engine.stop()
            self.launch_needed({kind})
            return self._wait(kind)

    def _wait(self, kind: str) -> list[EngineProcess]:
        engines = self.by_kind[kind]
        for engine in engines:
            engine.wait_healthy()
        return engines


def _session_engines(config: pytest.Config) -> _SessionEngines:
    state = getattr(config, _FLEET_ATTR, None)
    if state is None:
        state = _SessionEngines()
        setattr(config, _FLEET_ATTR, state)
        config.add_cleanup(state.fleet.stop_all)
    return state


def _kinds_needed_by_session(session: pytest.Session) -> set[str]:
    return {kind for item in session.items for kind in KINDS
            if kind in getattr(item, "fixturenames", ())}  # fmt: skip


def _engines_for(request: pytest.FixtureRequest, kind: str):
    state = _session_engines(request.config)
    state.launch_needed(_kinds_needed_by_session(request.session) | {kind})
    return state.healthy(kind)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return tiny_qwen3_dir()


@pytest.fixture(scope="session")
def engine_fleet(request: pytest.FixtureRequest) -> EngineFleet:
    return _session_engines(request.config).fleet


@pytest.fixture(scope="session")
def tokens_engine(request: pytest.FixtureRequest, tiny_model_dir: Path) -> str:
    (engine,) = _engines_for(request, TOKENS)
    return engine.url


@pytest.fixture(scope="session")
def pd_engines(request: pytest.FixtureRequest, tiny_model_dir: Path) -> PDEngines:
    prefill, decode = _engines_for(request, PD)
    return PDEngines(prefill.url, decode.url, decode.log_path)


@pytest.fixture(scope="module")
def vision_engine(request: pytest.FixtureRequest) -> Iterator[VisionEngine]:
    engine = _session_engines(request.config).fleet.launch(vision_spec(tiny_qwen2_vl_dir()))
    try:
        engine.wait_healthy(timeout_s=600)  # 60 s alone; slower when other work shares the cores
        yield VisionEngine(engine.url, engine.spec.model_dir, engine.log_path)
    finally:
        engine.stop()


def stop_engines_after_last_use(item: pytest.Item) -> None:
    """Stop the shared engines of a kind once the last selected test using them has run.

    Idle P/D engines keep both cores busy (their workers poll), which starved the rest of the
    suite and the vision engine's boot; no test after the last user needs them.
    """
    state = getattr(item.config, _FLEET_ATTR, None)
    if state is None or not state.by_kind:
        return
    last = _last_users(item.session)
    for kind, engines in state.by_kind.items():
        if last.get(kind) is item:
            for engine in engines:
                engine.stop()


def _last_users(session: pytest.Session) -> dict[str, pytest.Item]:
    cached = getattr(session, "_render_service_last_engine_users", None)
    if cached is None:
        cached = {}
        for candidate in session.items:
            for kind in KINDS:
                if kind in getattr(candidate, "fixturenames", ()):
                    cached[kind] = candidate
        session._render_service_last_engine_users = cached  # type: ignore[attr-defined]
    return cached
