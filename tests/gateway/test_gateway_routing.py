"""Routing policies, the prefix index, and the gateway config/CLI."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import pytest

from render_service.errors import ConfigError
from render_service.gateway.cli import add_gateway_parser, gateway_config_from_args
from render_service.gateway.config import GatewayConfig
from render_service.gateway.prefix_index import MMRange, PrefixIndex, PromptBlocks, block_hashes
from render_service.gateway.routing import (
    IMBALANCE_ABS,
    LeastOutstanding,
    PrefixAware,
    RoundRobin,
)


@dataclass(eq=False)
class E:
    url: str
    outstanding: int = 0


def test_block_hashes_chain_full_blocks_only() -> None:
    """Keys cover full blocks; equal keys mean equal prefixes; the tail block is ignored."""
    a = block_hashes(list(range(40)), 16)
    b = block_hashes(list(range(32)) + [99] * 8, 16)
    c = block_hashes([7] + list(range(1, 40)), 16)
    assert len(a) == 2 and a == b
    assert c[0] != a[0] and c[1] != a[1]  # block 1 is equal but its parent differs


def test_block_keys_cover_images_and_cache_salt() -> None:
    """Equal placeholder ids with different images share only the blocks before the image;
    a cache_salt changes every block (vLLM salts the first block, and keys chain)."""
    ids = [7] * 16 + [151655] * 32 + [8] * 16  # text, an image's 32 placeholders, text
    cat = block_hashes(ids, 16, mm_ranges=[MMRange(16, 32, "cat")])
    dog = block_hashes(ids, 16, mm_ranges=[MMRange(16, 32, "dog")])
    assert cat[0] == dog[0] and all(a != b for a, b in zip(cat[1:], dog[1:]))
    assert block_hashes(ids, 16, mm_ranges=[MMRange(16, 32, "cat")]) == cat
    salted = block_hashes(ids, 16, cache_salt="tenant-a")
    assert block_hashes(ids, 16, cache_salt="tenant-a") == salted
    assert all(a != b for a, b in zip(salted, block_hashes(ids, 16)))
    assert all(a != b for a, b in zip(salted, block_hashes(ids, 16, cache_salt="tenant-b")))


def test_prompt_blocks_read_the_rendered_request() -> None:
    """Image hashes and placeholder ranges come from the GenerateRequest's `features`."""
    ids = [1] * 64
    features = {"mm_hashes": {"image": ["h1"]}, "mm_placeholders": {"image": [{"offset": 20, "length": 10}]},
                "kwargs_data": None, "mm_metadata": None}
    blocks = PromptBlocks.of_request({"token_ids": ids, "features": features, "cache_salt": "s"})
    assert blocks.mm_ranges == (MMRange(20, 10, "h1"),) and blocks.cache_salt == "s"
    assert blocks.keys(16) == block_hashes(ids, 16, cache_salt="s", mm_ranges=[MMRange(20, 10, "h1")])
    assert PromptBlocks.of_request({"token_ids": ids, "features": None}).keys(16) == block_hashes(ids, 16)


def test_prefix_index_lru_is_bounded() -> None:
    """Past capacity the least recently used keys go first; forget drops an engine."""
    index = PrefixIndex(capacity=3)
    index.record("e", [1, 2, 3])
    index.record("e", [1])  # touch 1
    index.record("e", [4])
    assert index.size("e") == 3 and index.match_blocks("e", [1]) == 1
    assert index.match_blocks("e", [2]) == 0
    index.forget("e")
    assert index.size("e") == 0


def test_round_robin_cycles() -> None:
    """Each engine in turn."""
    engines = [E("a"), E("b"), E("c")]
    policy = RoundRobin()
    assert [policy.choose(engines, []).url for _ in range(4)] == ["a", "b", "c", "a"]


def test_least_outstanding_picks_idlest_and_rotates_ties() -> None:
    """Fewest in flight wins; ties are shared."""
    engines = [E("a", 3), E("b", 1), E("c", 1)]
    policy = LeastOutstanding()
    assert {policy.choose(engines, []).url for _ in range(4)} == {"b", "c"}


def test_prefix_aware_prefers_longest_cached_prefix() -> None:
    """The engine that saw the longest prefix wins; with no match, least outstanding."""
    policy = PrefixAware(PrefixIndex(1000))
    a, b = E("a", 2), E("b", 0)
    shared = list(range(64))
    policy.record(a, block_hashes(shared, 16))
    policy.record(b, block_hashes(shared[:16], 16))
    keys = block_hashes(shared + [5] * 16, 16)
    assert policy.choose([a, b], keys) is a
    assert policy.choose([a, b], block_hashes([9] * 64, 16)) is b


def test_prefix_aware_falls_back_when_imbalanced() -> None:
    """A cache hit is not worth queueing behind many more requests than the idlest engine."""
    policy = PrefixAware(PrefixIndex(1000))
    a, b = E("a", IMBALANCE_ABS + 1), E("b", 0)
    keys = block_hashes(list(range(32)), 16)
    policy.record(a, keys)
    assert policy.choose([a, b], keys) is b
    a.outstanding = IMBALANCE_ABS
    assert policy.choose([a, b], keys) is a


async def test_prefix_aware_routes_repeat_prompts_to_same_engine() -> None:
    """Through the gateway: the same long prompt keeps landing on one engine of two."""
    from .conftest import fake_engines, running_gateway

    engines = fake_engines("http://e0", "http://e1")
    body = {"messages": [{"role": "user", "content": "x" * 100}]}
    async with running_gateway(engines, routing="prefix_aware") as h:
        for _ in range(4):
            assert (await h.client.post("/v1/chat/completions", json=body)).status_code == 200
    counts = sorted(len(e.calls) for e in engines.values())
    assert counts == [0, 4]


async def test_prefix_is_remembered_only_on_the_engine_that_served_it() -> None:
    """A try that failed does not make prefix-aware routing think that engine holds the prompt:
    after e0 fails and e1 serves, the same prompt keeps going to e1."""
    from render_service.gateway.testing import Fault

    from .conftest import fake_engines, running_gateway

    engines = fake_engines("http://e0", "http://e1")
    engines["http://e0"].faults.append(Fault.status(500))
    body = {"messages": [{"role": "user", "content": "y" * 100}]}
    async with running_gateway(engines, routing="prefix_aware") as h:
        for _ in range(5):
            assert (await h.client.post("/v1/chat/completions", json=body)).status_code == 200
    assert len(engines["http://e0"].calls) == 1  # the failed first try only
    assert len(engines["http://e1"].calls) == 5


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_gateway_parser(sub, lambda p: p.add_argument("model", nargs="?"),
                       lambda p: p.add_argument("--log-level", default="info"))
    return parser.parse_args(["gateway", *argv])


def test_cli_flags_build_pd_config() -> None:
    """--prefill/--decode (repeatable), per-pool routing, timeouts and limits."""
    args = parse(["--prefill", "http://p0/", "--decode", "http://d0", "http://d1",
                  "--decode", "http://d2", "--prefill-routing", "round_robin",
                  "--first-token-timeout", "7", "--max-retries", "1", "--block-size", "32"])
    config = gateway_config_from_args(args)
    assert config.prefill == ("http://p0",) and config.decode == ("http://d0", "http://d1", "http://d2")
    assert config.policy_for("prefill") == "round_robin"
    assert config.policy_for("decode") == "least_outstanding"
    assert config.timeouts.first_token_s == 7 and config.max_retries == 1 and config.block_size == 32


def test_conversations_from_file_and_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The `conversations` section, and its flags over it."""
    yaml_file = tmp_path / "gw.yaml"
    yaml_file.write_text("prefill: [http://p]\ndecode: [http://d]\n"
                         "conversations: {max_conversations: 50, decoder_kv_blocks_ttl: 120}\n")
    config = gateway_config_from_args(parse(["--config", str(yaml_file), "--enable-conversations",
                                             "--kv-recompute-threshold", "128"]))
    conversations = config.conversations
    assert conversations.enabled and conversations.max_conversations == 50
    assert conversations.kv_recompute_threshold == 128
    assert conversations.reuse_window_s == 120 - conversations.ttl_margin_s
    assert not gateway_config_from_args(parse(["--config", str(yaml_file)])).conversations.enabled


def test_config_file_yaml_and_json_with_flag_override(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A YAML or JSON file configures everything; flags win over it."""
    yaml_file = tmp_path / "gw.yaml"
    yaml_file.write_text("engines: [http://a, http://b]\nrouting: round_robin\n"
                         "health: {interval_s: 5, failure_threshold: 3}\n")
    config = gateway_config_from_args(parse(["--config", str(yaml_file), "--health-interval", "1"]))
    assert config.engines == ("http://a", "http://b") and config.routing == "round_robin"
    assert config.health.interval_s == 1 and config.health.failure_threshold == 3
    json_file = tmp_path / "gw.json"
    json_file.write_text(json.dumps({"prefill": ["http://p"], "decode": ["http://d"],
                                     "timeouts": {"prefill_s": 3}}))
    config = gateway_config_from_args(parse(["--config", str(json_file)]))
    assert config.disaggregated and config.timeouts.prefill_s == 3


@pytest.mark.parametrize("data, message", [
    ({}, "needs --engine"),
    ({"engines": ["http://a"], "prefill": ["http://p"], "decode": ["http://d"]}, "not both"),
    ({"prefill": ["http://p"]}, "needs --engine"),
    ({"engines": ["a:8000"]}, "http://"),
    ({"engines": ["http://a"], "routing": "random"}, "choose from"),
    ({"engines": ["http://a"], "engnes": []}, "unknown keys"),
    ({"engines": ["http://a"], "timeouts": {"prefill_s": 0}}, "must be > 0"),
    ({"engines": ["http://a"], "max_concurrent_streams": 0}, ">= 1"),
    ({"engines": ["http://a"], "conversations": {"enabled": True}}, "needs a P/D layout"),
    ({"prefill": ["http://p"], "decode": ["http://d"],
      "conversations": {"decoder_kv_blocks_ttl": 5, "ttl_margin_s": 10}}, "must exceed"),
    ({"prefill": ["http://p"], "decode": ["http://d"], "conversations": {"ttl": 5}}, "ttl"),
    ({"engines": ["http://a"], "kv_lease_duration": 0}, "kv-lease-duration"),
    ({"engines": ["http://a"], "fingerprint_mode": "random"}, "choose from"),
    ({"engines": ["http://a"], "fingerprint_mode": "custom"}, "--fingerprint-value"),
])
def test_bad_config_is_a_config_error(data: dict, message: str) -> None:
    """Typos and impossible settings fail at start with a message naming the problem."""
    with pytest.raises(ConfigError, match=message):
        GatewayConfig.from_mapping(data)
