#!/usr/bin/env bash
# The test command (README, second command). Installs what the tests need, then runs them:
#   .venv            render-service with its test extra
#   .cache/vllm-*    vLLM 0.32 CPU engine and the vLLM 0.33 reference (see .ci/install_vllm.sh)
# Extra arguments go to pytest, e.g. `tests/run.sh -k parsers -x`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$py" -m venv .venv; fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[test]'
bash .ci/install_vllm.sh
export RS_VLLM_ENGINE_VENV=${VLLM_ENGINE_VENV:-$root/.cache/vllm-engine}
export RS_VLLM_REF_VENV=${VLLM_REF_VENV:-$root/.cache/vllm-ref}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec .venv/bin/python -m pytest "$@"
