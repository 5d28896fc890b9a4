"""Suite-wide fixtures: real vLLM engines from tests/harness, started lazily per session."""

from .harness.fixtures import engine_fleet, pd_engines, tiny_model_dir, tokens_engine  # noqa: F401
