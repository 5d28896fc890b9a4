"""Ports handed to test servers, and what happens when an engine loses one anyway.

A CI run lost its P/D pair because NIXL's side-channel port (picked from the ephemeral range)
was taken before the engine bound it; the engine then hung unhealthy for the whole 300 s bound.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from .engines import EnginePortTaken, EngineProcess, EngineSpec, EngineStartError
from .ports import PORT_FLOOR, _ephemeral_low, free_port


def test_ports_are_free_distinct_and_below_the_ephemeral_range():
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(PORT_FLOOR <= port < _ephemeral_low() for port in ports)
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def _fake_engine(tmp_path, script: str) -> EngineProcess:
    """An EngineProcess around a stand-in process writing `script`'s output to the log."""
    log_path = tmp_path / "engine.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-c", script], stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    spec = EngineSpec(name="fake", model_dir=tmp_path, port=free_port())
    record_path = tmp_path / "record.json"
    record_path.write_text("{}")
    return EngineProcess(spec, log_path, process, time.monotonic(), record_path)


# What vLLM's NIXL handshake thread prints when its port is taken; the process stays up.
HANGS_AFTER_BIND_FAILURE = """
import sys, time
print("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:50121')", flush=True)
time.sleep(600)
"""


def test_an_engine_that_lost_a_port_fails_fast_and_is_stopped(tmp_path):
    engine = _fake_engine(tmp_path, HANGS_AFTER_BIND_FAILURE)
    started = time.monotonic()
    with pytest.raises(EnginePortTaken, match="lost a port"):
        engine.wait_healthy(timeout_s=60)
    assert time.monotonic() - started < 30
    assert engine.process.poll() is not None


def test_an_engine_that_exits_for_another_reason_is_not_retried(tmp_path):
    engine = _fake_engine(tmp_path, "print('CUDA? no'); raise SystemExit(3)")
    with pytest.raises(EngineStartError, match="exited with code 3") as error:
        engine.wait_healthy(timeout_s=60)
    assert not isinstance(error.value, EnginePortTaken)
