from collections.abc import Iterator

import pytest

from .tool_parser_support import Oracle


@pytest.fixture(scope="session")
def vllm_oracle() -> Iterator[Oracle]:
    oracle = Oracle()
    yield oracle
    oracle.close()
