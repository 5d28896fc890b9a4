"""Suite-wide setup: Hypothesis profiles, and real vLLM engines from tests/harness (started lazily).

The default profile is derandomized so a given commit always runs the same examples: CI is
reproducible and a red run is never a dice roll. `--hypothesis-profile=explore` draws fresh
random examples (run it locally, repeatedly, to hunt for new counterexamples; add each one
found as a plain regression test).
"""

import os
import time
from collections.abc import Iterator

import pytest
from hypothesis import settings

from .harness.fixtures import (  # noqa: F401
    engine_fleet,
    pd_engines,
    stop_engines_after_last_use,
    tiny_model_dir,
    tokens_engine,
)
from .parsers.vllm_ref import VllmRef

settings.register_profile("deterministic", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile("deterministic")


ENGINE_FIXTURES = frozenset({"tokens_engine", "pd_engines", "engine_fleet", "vision_engine"})


def pytest_collection_modifyitems(config, items):  # noqa: ANN001, ANN201, ARG001
    """Every test of a file that starts real engines is marked `engine`, so tests/run.sh runs
    those files by themselves, after the rest (see there)."""
    engine_files = {item.path for item in items
                    if item.get_closest_marker("engine") or ENGINE_FIXTURES & set(item.fixturenames)}
    for item in items:
        if item.path in engine_files and not item.get_closest_marker("engine"):
            item.add_marker(pytest.mark.engine)


def pytest_runtest_teardown(item, nextitem):  # noqa: ANN001, ANN201, ARG001
    stop_engines_after_last_use(item)


_TIMELINE = os.environ.get("RS_TEST_TIMELINE")  # a file: one line per test, to balance workers


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):  # noqa: ANN001, ANN201, ARG001
    start = time.time()
    yield
    if _TIMELINE:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(_TIMELINE, "a", encoding="utf-8") as out:
            out.write(f"{worker}\t{start:.2f}\t{time.time() - start:.2f}\t{item.nodeid}\n")


@pytest.fixture(scope="session")
def vllm_ref() -> Iterator[VllmRef]:
    """The session's one vLLM 0.33 reference process (each start imports vLLM: ~20 s)."""
    helper = VllmRef()
    yield helper
    helper.close()
