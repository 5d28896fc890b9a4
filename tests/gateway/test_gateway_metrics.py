"""Gateway metrics move as requests are served: sample counts and sums, not HELP lines.

Each test reads the default registry before and after one request and checks the deltas
(the registry is process-wide, so absolute values would depend on the other tests).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY

from render_service.gateway.testing import Fault

from .conftest import fake_engines, running_gateway
from .gateway_fakes import MODEL, ids_of

P = "render_service_gateway_"
DELAY = 0.02  # per engine event


def chat(**extra: object) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@dataclass
class Histogram:
    name: str
    labels: dict[str, str]

    def read(self) -> tuple[float, float]:
        return value(self.name + "_count", **self.labels), value(self.name + "_sum", **self.labels)


class Deltas:
    """Snapshot of histograms (count, sum) and counters; `after()` gives the differences."""

    def __init__(self, **series: Histogram | tuple[str, dict[str, str]]) -> None:
        self.series = series
        self.before = {k: self._read(s) for k, s in series.items()}

    @staticmethod
    def _read(s: Histogram | tuple[str, dict[str, str]]) -> tuple[float, float]:
        if isinstance(s, Histogram):
            return s.read()
        return value(s[0], **s[1]), 0.0

    def after(self) -> dict[str, tuple[float, float]]:
        out = {}
        for key, s in self.series.items():
            count, total = self._read(s)
            out[key] = (count - self.before[key][0], total - self.before[key][1])
        return out


def phase(name: str) -> Histogram:
    return Histogram(P + "phase_duration_seconds", {"phase": name})


async def test_streaming_request_moves_client_latencies_and_phases() -> None:
    """TTFT once, ITL per later chunk (with the engine's pacing in it), e2e once (ok), one
    render / decode / derender phase each, and the engine choice."""
    engines = fake_engines("http://e0", tokens=ids_of("abc"), token_delay_s=DELAY)
    deltas = Deltas(
        ttft=Histogram(P + "time_to_first_token_seconds", {"endpoint": "chat"}),
        itl=Histogram(P + "inter_token_latency_seconds", {"endpoint": "chat"}),
        e2e=Histogram(P + "e2e_request_latency_seconds", {"endpoint": "chat", "outcome": "ok"}),
        render=phase("render"), decode=phase("decode"), derender=phase("derender"),
        choice=(P + "engine_requests_total", {"pool": "collocated", "engine": "http://e0"}))
    async with running_gateway(engines) as h:
        response = await h.client.post("/v1/chat/completions", json=chat(stream=True))
    chunks = response.content.count(b"data: ") - 1  # without [DONE]
    d = deltas.after()
    assert chunks == 5  # role + "a", "b", "c", final
    assert d["ttft"][0] == 1 and d["ttft"][1] >= DELAY  # the first event took DELAY
    assert d["itl"][0] == chunks - 1 and d["itl"][1] >= 2.5 * DELAY  # 3 paced gaps
    assert d["e2e"][0] == 1 and d["e2e"][1] >= 4 * DELAY
    assert d["render"][0] == 1 and d["derender"][0] == 1 and d["decode"][0] == 1
    assert d["decode"][1] >= 3.5 * DELAY
    assert d["choice"][0] == 1


async def test_pd_streaming_and_batch_both_time_the_kv_handoff() -> None:
    """P/D: prefill and kv_handoff phases for a streaming and a non-streaming request; both
    pools' engine choices counted."""
    engines = fake_engines("http://p0", "http://d0", tokens=ids_of("pd"), token_delay_s=DELAY)
    deltas = Deltas(
        prefill=phase("prefill"), handoff=phase("kv_handoff"), decode=phase("decode"),
        p_choice=(P + "engine_requests_total", {"pool": "prefill", "engine": "http://p0"}),
        d_choice=(P + "engine_requests_total", {"pool": "decode", "engine": "http://d0"}),
        e2e=Histogram(P + "e2e_request_latency_seconds", {"endpoint": "chat", "outcome": "ok"}))
    async with running_gateway(engines, prefill=("http://p0",), decode=("http://d0",)) as h:
        streamed = await h.client.post("/v1/chat/completions", json=chat(stream=True))
        batch = await h.client.post("/v1/chat/completions", json=chat())
    assert streamed.status_code == batch.status_code == 200
    assert batch.json()["choices"][0]["message"]["content"] == "pd"
    d = deltas.after()
    assert d["prefill"][0] == 2 and d["prefill"][1] >= 2 * DELAY  # 1 token, paced, each
    assert d["handoff"][0] == 2 and d["handoff"][1] >= 2 * DELAY  # first decode event paced
    assert d["decode"][0] == 2
    assert d["p_choice"][0] == 2 and d["d_choice"][0] == 2
    assert d["e2e"][0] == 2


async def test_errors_are_counted_by_cause() -> None:
    """A decode 500 (retried), a stream cut mid-way, a prefill refusal and a request with no
    healthy engine each count under their own cause."""
    causes = ("decode_engine_error", "decode_unavailable", "prefill_unavailable", "http_503")
    deltas = Deltas(**{c: (P + "errors_total", {"cause": c}) for c in causes})
    engines = fake_engines("http://p0", "http://d0", "http://d1", tokens=ids_of("abcd"))
    engines["http://d0"].faults.append(Fault.status(500))
    engines["http://d1"].faults.append(Fault.die_after(2))
    engines["http://p0"].faults.append(Fault.unreachable())
    async with running_gateway(engines, prefill=("http://p0",), decode=("http://d0", "http://d1"),
                               decode_routing="round_robin") as h:
        cut = await h.client.post("/v1/chat/completions", json=chat(stream=True))
        engines["http://d0"].healthy = engines["http://d1"].healthy = False
        await h.gateway.health.check_once(initial=True)
        refused = await h.client.post("/v1/chat/completions", json=chat())
    assert b'"code":502' in cut.content and refused.status_code == 503
    d = deltas.after()
    assert {c: d[c][0] for c in causes} == {c: 1 for c in causes}
