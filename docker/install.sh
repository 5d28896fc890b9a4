#!/bin/sh
# Installs render-service into a fresh virtual environment: the one install recipe of the image.
# The Dockerfile's builder stage runs it, and tests/deploy/test_image_install.py runs the same
# file in a temporary folder, so what CI proves is what the image does.
#
#   docker/install.sh SRC_DIR VENV_DIR WHEEL_DIR
#
# 1. build the project's own wheel (pure Python) from SRC_DIR into WHEEL_DIR (an empty folder);
# 2. create VENV_DIR and install that wheel file with every dependency as a binary wheel only
#    (--only-binary): the final image has no compiler, so a dependency that would need one
#    fails here, in the builder and in CI, never at run time. The wheel is named by its path so
#    that a same-named project on the index can never be picked instead;
# 3. check the dependency tree and that the console script starts.
set -eu

if [ "$#" -ne 3 ]; then
  echo "usage: $0 SRC_DIR VENV_DIR WHEEL_DIR" >&2
  exit 2
fi
src=$1
venv=$2
wheels=$3
python=${PYTHON:-python3}

mkdir -p "$wheels"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$wheels" "$src"
set -- "$wheels"/render_service-*.whl
if [ "$#" -ne 1 ] || [ ! -f "$1" ]; then
  echo "install.sh: expected exactly one render_service wheel in $wheels, found: $*" >&2
  exit 1
fi
"$venv/bin/python" -m pip install --quiet --only-binary=:all: "$1"
"$venv/bin/python" -m pip check
"$venv/bin/render-service" --help >/dev/null
