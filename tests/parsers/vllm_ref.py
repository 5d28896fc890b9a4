"""Client of vllm_ref_helper.py: one vLLM 0.33 reference process per test session.

The reference venv is found through RS_VLLM_REF_VENV (set by tests/run.sh), defaulting to
.cache/vllm-ref. A missing venv is a test failure, never a skip: CI installs it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import psutil

REPO_ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).resolve().parent / "vllm_ref_helper.py"


class VllmRefError(RuntimeError):
    pass


def ref_venv() -> Path:
    venv = Path(os.environ.get("RS_VLLM_REF_VENV", REPO_ROOT / ".cache" / "vllm-ref"))
    if not (venv / ".done").exists() or not (venv / "bin" / "python").exists():
        raise VllmRefError(
            f"vLLM 0.33 reference venv not found at {venv} (no .done marker); "
            "run `bash .ci/install_vllm.sh` (tests/run.sh does it)"
        )
    return venv


# A reference process past this resident size is replaced before the next call: its caches
# (tokenizers, vLLM parser state) grow over a session, and two pytest workers each own one.
MAX_RSS_BYTES = int(os.environ.get("RS_VLLM_REF_MAX_RSS_MB", "2500")) * 2**20


class VllmRef:
    """The helper process; its ops keep no state between calls but caches, so it is replaced
    transparently when it grows past MAX_RSS_BYTES."""

    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        python = ref_venv() / "bin" / "python"
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": ""}
        self._proc = subprocess.Popen(
            [str(python), str(HELPER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, encoding="utf-8", env=env,
        )
        ready = self._read()
        if ready != "ready":
            raise VllmRefError(f"reference helper did not start: {ready!r}")

    def _read(self) -> Any:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise VllmRefError(f"reference helper exited with {self._proc.poll()}")
        reply = json.loads(line)
        if not reply["ok"]:
            raise VllmRefError(reply["error"] + "\n" + reply.get("traceback", ""))
        return reply["result"]

    def call(self, op: str, **kwargs: Any) -> Any:
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"op": op, **kwargs}, ensure_ascii=False) + "\n")
        self._proc.stdin.flush()
        result = self._read()
        if psutil.Process(self._proc.pid).memory_info().rss > MAX_RSS_BYTES:
            self.close()
            self._start()
        return result

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
