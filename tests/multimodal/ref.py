"""Shared plumbing for multimodal differential tests against vLLM 0.33 (the ref venv).

- `run_ref_script`: run a Python snippet in the ref venv, JSON on stdin, JSON (last line) out.
- `STUB_ENV`: the environment that lets vLLM's vision models import without torchvision
  (docs/multimodal-design.md section 0); `start_ref_render` starts `vllm launch render` with it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from ..render.ref_server import RefRenderServer, ref_venv

STUB_DIR = Path(__file__).resolve().parent / "ref_torchvision_stub"
STUB_ENV = {"PYTHONPATH": str(STUB_DIR)}


def run_ref_script(script: str, payload: Any, *, stub: bool = False, timeout: float = 300) -> Any:
    """Run `script` with the ref venv's Python; it reads JSON on stdin and prints JSON last."""
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_LOGGING_LEVEL": "ERROR",
        **(STUB_ENV if stub else {}),
    }
    proc = subprocess.run(
        [str(ref_venv() / "bin" / "python"), "-c", script],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Decodes pairs of base64 MultiModalKwargsItems with vLLM's own decoder and compares them.
_ITEMS_EQUAL_SCRIPT = r"""
import json, sys
from vllm.entrypoints.scale_out.token_in_token_out.mm_serde import decode_mm_kwargs_item
pairs = json.load(sys.stdin)
print(json.dumps([decode_mm_kwargs_item(a) == decode_mm_kwargs_item(b) for a, b in pairs]))
"""


def items_equal_in_vllm(pairs: list[tuple[str | None, str | None]]) -> list[bool]:
    """Per pair: do both b64 items decode (with vLLM's decoder) to equal MultiModalKwargsItems?

    Byte equality is not expected: vLLM's item key order follows set iteration order.
    """
    testable = [(a, b) for a, b in pairs if a is not None and b is not None]
    results = iter(run_ref_script(_ITEMS_EQUAL_SCRIPT, testable, stub=True) if testable else [])
    return [(a is None and b is None) or (a is not None and b is not None and next(results)) for a, b in pairs]


def start_ref_render(model_dir: Path, flags: tuple[str, ...], log_dir: Path) -> RefRenderServer:
    return RefRenderServer(model_dir, flags, log_dir, extra_env=STUB_ENV).start()
