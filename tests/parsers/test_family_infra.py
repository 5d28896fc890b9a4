"""The family test infrastructure works for every parser name vLLM 0.33 registers.

For each name: its tokenizer builds (markers single tokens), its corpus is non-empty, and
one batched `family` oracle call runs the corpus plus hostile variants through vLLM's
composed batch and stream paths and the tool / reasoning parser alone. vLLM raising on a
case is a recorded result; a missing result is an infrastructure error.
"""

from __future__ import annotations

import pytest

from .family_corpus import (
    REASONING_FORMATS,
    TOOL_FORMATS,
    corpus_entries,
    family_markers,
    hostile_variants,
)
from .family_oracle import family_cases, vllm_family
from .family_tokenizers import (
    FAMILIES,
    REASONING_FAMILY,
    REGISTERED_REASONING_PARSERS,
    REGISTERED_TOOL_PARSERS,
    TOOL_FAMILY,
    family_key,
    family_tokenizer,
    token_chunks,
)

pytestmark = pytest.mark.vllm

ALL_NAMES = sorted(set(REGISTERED_TOOL_PARSERS) | set(REGISTERED_REASONING_PARSERS))

# Composed parsers vLLM cannot build in the reference venv, with why (a recorded result).
# (cohere_command3/4 need cohere_melody, which .ci/install_vllm.sh installs: none left.)
KNOWN_COMPOSED_FAILURES: dict[str, str] = {}

# vLLM raises on some real outputs of these families; the error is the recorded result.
KNOWN_CASE_ERRORS = {
    # Harmony (gpt-oss) is parsed by HarmonyParser only, chosen by model type; the names
    # registered for it are stubs outside it. Out of scope here (gpt-oss has its own issue).
    "openai": "Use HarmonyParser",
    "openai_gptoss": "Use HarmonyParser",
    # InternLM2's parser splits on the first <|action_start|><|plugin|> into exactly two
    # parts: parallel calls (Intern-S1's template renders them) raise ValueError.
    "internlm": "too many values to unpack",
}


def test_pinned_registries_are_vllms(vllm_ref):
    got = vllm_ref.call("registries")
    assert tuple(got["tool"]) == REGISTERED_TOOL_PARSERS
    assert tuple(got["reasoning"]) == REGISTERED_REASONING_PARSERS


def test_every_class_constructs_on_its_family_tokenizer(vllm_ref):
    """Each tool parser and reasoning parser alone, and composed by ParserManager with the
    tokenizer (vLLM's start-up validation), for every name, in one call."""
    items = []
    for kind, names in (("tool", REGISTERED_TOOL_PARSERS),
                        ("reasoning", REGISTERED_REASONING_PARSERS)):
        for name in names:
            bundle = family_tokenizer(kind, name)
            items.append({f"{kind}_parser": name, "tokenizer_dir": str(bundle.directory),
                          "loader": FAMILIES[family_key(kind, name)].loader, "_name": name})
    got = vllm_ref.call("family_construct", items=items)
    failures = {}
    for item, errors in zip(items, got, strict=True):
        name = item["_name"]
        if errors and set(errors) == {"composed"} and name in KNOWN_COMPOSED_FAILURES:
            assert KNOWN_COMPOSED_FAILURES[name] in errors["composed"], errors
            continue
        if errors:
            failures[(item.get("tool_parser"), item.get("reasoning_parser"))] = errors
    assert not failures, failures


def test_every_name_has_a_family_and_a_corpus():
    assert set(TOOL_FAMILY) == set(REGISTERED_TOOL_PARSERS) == set(TOOL_FORMATS)
    assert set(REASONING_FAMILY) == set(REGISTERED_REASONING_PARSERS) == set(REASONING_FORMATS)
    for kind, names in (("tool", REGISTERED_TOOL_PARSERS),
                        ("reasoning", REGISTERED_REASONING_PARSERS)):
        for name in names:
            entries = corpus_entries(kind, name)
            assert entries, (kind, name)
            assert all(e["text"] and e["source"] for e in entries), (kind, name)


def test_family_markers_are_single_tokens_and_special_as_declared():
    for key, fam in FAMILIES.items():
        if fam.base != "augmented":
            continue
        from .family_tokenizers import bundle_for_family

        bundle = bundle_for_family(key)
        for marker in (*fam.special, *fam.plain):
            assert len(bundle.encode(marker)) == 1, (key, marker)
        assert set(fam.special) <= set(bundle.special_tokens), key
        assert not set(fam.plain) & set(bundle.special_tokens), key


def test_augmented_special_tokens_match_transformers():
    """The special tokens computed for augmented families are what transformers reports."""
    from transformers import AutoTokenizer

    for key in ("kimi_k2", "gemma4_rt", "hy"):
        from .family_tokenizers import bundle_for_family

        bundle = bundle_for_family(key)
        hf = AutoTokenizer.from_pretrained(str(bundle.directory))
        assert set(hf.all_special_tokens) == set(bundle.special_tokens), key
        assert frozenset(hf.all_special_ids) == bundle.special_ids, key


def test_token_chunks_cover_text_and_keep_markers_whole():
    bundle = family_tokenizer("tool", "kimi_k2")
    text = "Hi 東京😀<|tool_call_begin|>x"
    chunks = token_chunks(bundle, text)
    assert "".join(t for t, _ in chunks) == text
    assert ("<|tool_call_begin|>", [bundle.token_id("<|tool_call_begin|>")]) in chunks


def test_hostile_variants_shape():
    variants = hostile_variants("a<tool_call>{\"x\": 1}</tool_call>", ["<tool_call>", "</tool_call>"])
    assert variants["empty"] == ""
    assert variants["markers_only"] == "<tool_call></tool_call>"
    assert "cut@2" in variants and variants["cut@2"] == "a<"
    assert "unbalanced_json_missing_brace" in variants


def _cases(kind: str, name: str, bundle) -> tuple[list[dict], int]:
    entries = corpus_entries(kind, name)
    richest = max(entries, key=lambda e: len(e["text"]))
    markers = family_markers(kind, name, richest["text"])
    hostile = [{"text": t, "prompt": richest.get("prompt")}
               for t in hostile_variants(richest["text"], markers, max_cuts=10).values()]
    return family_cases(bundle, [*entries, *hostile]), len(entries)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_oracle_runs_every_family(vllm_ref, name):
    tool = name if name in REGISTERED_TOOL_PARSERS else None
    reasoning = name if name in REGISTERED_REASONING_PARSERS else None
    kind = "tool" if tool else "reasoning"
    bundle = family_tokenizer(kind, name)
    if tool and reasoning:
        assert family_tokenizer("reasoning", name).name == bundle.name
    cases, n_real = _cases(kind, name, bundle)
    if tool and reasoning:  # the reasoning corpus may hold more (e.g. thinking templates)
        extra = [e for e in corpus_entries("reasoning", name)
                 if e["text"] not in {c["text"] for c in cases}]
        cases[n_real:n_real] = family_cases(bundle, extra)
        n_real += len(extra)
    out = vllm_family(vllm_ref, tool=tool, reasoning=reasoning, bundle=bundle, cases=cases)

    assert not out.infra_errors(), out.infra_errors()
    for res in out.results:
        if tool:
            assert "tool" in res or "tool_error" in res
        if reasoning:
            assert "reasoning" in res or "reasoning_error" in res

    if name in KNOWN_COMPOSED_FAILURES:
        assert KNOWN_COMPOSED_FAILURES[name] in (out.construct["composed"] or "")
        return
    assert out.construct == {"tool": None, "reasoning": None, "composed": None}, out.construct
    # vLLM handles every real output on both paths (hostile ones may raise: that is data).
    known = KNOWN_CASE_ERRORS.get(name)
    for case, res in zip(out.cases[:n_real], out.results[:n_real], strict=True):
        for key in ("batch", "stream"):
            if known and key not in res:
                assert known in res[f"{key}_error"], res[f"{key}_error"]
                continue
            assert key in res, (case["text"], res.get(f"{key}_error"))
        if "stream" in res:
            assert len(res["stream"]["deltas"]) == len(case["chunks"])
