"""Makes the harness fixtures available to tests/harness/ on its own (`pytest tests/harness`).

tests/conftest.py imports the same fixtures for the rest of the suite; both share one
engine fleet per session (it lives on the pytest config object).
"""

from .fixtures import engine_fleet, pd_engines, tiny_model_dir, tokens_engine  # noqa: F401
