"""One differential check per JSON tool family (no reasoning parser): our composed batch
(`ChatParser`, as derender runs it) against vLLM 0.33's composed batch on the family's corpus
(real chat-template outputs), hostile variants of each entry and the test's own cases, in ONE
oracle call; plus split invariance of the tool parser on the family's tokenizer.

Divergences are never silent: a case whose result differs must be named in the test's
DIVERGENCES (and a named case must really differ, so the list cannot go stale), except the
one generic divergence every streaming JSON family shares, which must be named too:
KEPT_CALLS, a call that had streamed stays where vLLM's batch turns the whole output into
content (a cut, broken or trailing-text array); it is checked to lose no text. A family
whose vLLM batch returns neither content nor calls for some outputs names DROPS_OUTPUT: ours
keeps the text (or the calls that streamed) there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parsers._base import ToolParser
from tests.parsers.family_check import REQ, family_chat
from tests.parsers.family_corpus import corpus_entries, family_markers, hostile_variants
from tests.parsers.family_oracle import vllm_family
from tests.parsers.family_tokenizers import family_tokenizer

from .tool_parser_support import assert_split_invariant

__all__ = ["KEPT_CALLS", "DROPS_OUTPUT", "family_cases", "assert_family_matches_vllm", "assert_family_splits"]

KEPT_CALLS = "kept_calls"
DROPS_OUTPUT = "drops_output"


def family_cases(name: str, own: Mapping[str, str]) -> dict[str, str]:
    """The test's own cases, the corpus entries, and hostile variants of each entry."""
    cases = dict(own)
    for entry in corpus_entries("tool", name):
        cases[entry["name"]] = entry["text"]
        markers = family_markers("tool", name, entry["text"])
        for key, text in hostile_variants(entry["text"], markers).items():
            cases[f"{entry['name']}/{key}"] = text
    return cases


Outcome = tuple[str | None, list[tuple[str, str]]]


def assert_family_matches_vllm(
    vllm_ref: Any,
    name: str,
    cases: Mapping[str, str],
    divergences: Mapping[str, str],
    vllm_errors: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Our batch == vLLM's batch (content, names, argument strings) on every case, except
    the named divergences; `vllm_errors`: {substring of vLLM's error: what ours does}, the
    named divergences where vLLM's batch raises (ours must keep the text or give calls).
    Returns vLLM's batch per case."""
    chat = family_chat(tool=name, reasoning=None)
    out = vllm_family(vllm_ref, tool=name, bundle=family_tokenizer("tool", name),
                      cases=list(cases.values()))  # fmt: skip
    assert not out.infra_errors(), out.infra_errors()
    assert out.construct["tool"] is None, out.construct
    failures, differ, kept, dropped = [], set(), [], []
    raised: set[str] = set()
    batches: dict[str, dict[str, Any]] = {}
    for key, res in zip(cases, out.results, strict=True):
        text = cases[key]
        parsed = chat.parse(text, REQ, [])
        ours: Outcome = (parsed.content, [(c.name, c.arguments) for c in parsed.tool_calls])
        if "batch" not in res:
            error = res["batch_error"]
            matched = {part for part in vllm_errors or {} if part in error}
            raised |= matched
            if not matched:
                failures.append(f"{key}: vLLM raised {error}")
            elif not _keeps_text(ours, text) or not (ours[1] or ours[0] == (text or None)):
                failures.append(f"{key}: vLLM raised; ours {ours!r} loses text")
            continue
        batch = res["batch"]
        batches[key] = batch
        theirs: Outcome = (batch["content"], [(c["name"], c["arguments"]) for c in batch["tool_calls"]])
        if ours == theirs:
            continue
        differ.add(key)
        if key in divergences:
            continue
        if theirs == (text, []) and ours[1] and KEPT_CALLS in divergences:
            kept.append(key)
            assert _keeps_text(ours, text), f"{key}: kept calls lose text: {ours!r}"
            continue
        if theirs == (None, []) and text.strip() and DROPS_OUTPUT in divergences:
            dropped.append(key)
            assert ours[1] or ours[0] == text, f"{key}: ours loses text too: {ours!r}"
            continue
        failures.append(f"{key}: {text!r}\n  vLLM {theirs!r}\n  ours {ours!r}")
    assert not failures, "\n".join(failures)
    stale = [k for k in divergences if k not in (KEPT_CALLS, DROPS_OUTPUT) and k in cases and k not in differ]
    assert not stale, f"named divergences that no longer differ: {stale}"
    if KEPT_CALLS in divergences:
        assert kept, "KEPT_CALLS named but no case shows it"
    unused = set(vllm_errors or {}) - raised
    assert not unused, f"named vLLM errors no case shows: {sorted(unused)}"
    if DROPS_OUTPUT in divergences:
        assert dropped, "DROPS_OUTPUT named but no case shows it"
    return batches


def _keeps_text(ours: Outcome, text: str) -> bool:
    """The content is a subsequence of the output (nothing invented, order kept)."""
    chars = iter(text)
    return all(ch in chars for ch in ours[0] or "")


def assert_family_splits(name: str, parser: ToolParser, texts: Mapping[str, str]) -> None:
    """Streaming any split (tokens of the family's tokenizer, characters) == our batch."""
    bundle = family_tokenizer("tool", name)
    for text in texts.values():
        assert_split_invariant(parser, text, [(p, None) for p in bundle.pieces(text)])
