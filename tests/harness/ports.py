"""Loopback ports for servers the tests start (engines, reference servers, our own app).

A server binds its port seconds after we pick it (an engine's NIXL side channel 30-60 s later).
A port from the kernel's ephemeral range can be taken meanwhile by any outgoing connection or
`bind(0)`, and the suite makes thousands of loopback connections: a CI run lost its P/D pair to
exactly that ("Address already in use" on the side channel). The kernel never hands out ports
below the ephemeral range by itself, so we pick there, at random, skipping ports in use.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

PORT_FLOOR = 20_000
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL_LOW = 32_768  # Linux's default when the file cannot be read
_MIN_POOL = 1_000
_ATTEMPTS = 200
_random = random.SystemRandom()  # two test processes must not walk the same sequence
_handed_out: set[int] = set()


def free_port() -> int:
    """A port free right now on 127.0.0.1, outside the ephemeral range where possible."""
    low = _ephemeral_low()
    if low - PORT_FLOOR < _MIN_POOL:  # an unusual range: fall back to the kernel's pick
        return _kernel_port()
    for _ in range(_ATTEMPTS):
        port = _random.randrange(PORT_FLOOR, low)
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free loopback port in [{PORT_FLOOR}, {low}) after {_ATTEMPTS} tries")


def _ephemeral_low() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_LOW


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _kernel_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
