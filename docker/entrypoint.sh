#!/bin/sh
# Container entry point: `render-service serve` unless told otherwise.
#
#   (no arguments) | --flag ...   -> render-service serve [--flag ...]
#   serve ... | gateway ...        -> render-service serve|gateway ...
#   /models/x --flag ...           -> render-service serve /models/x --flag ...
#   sh | python ... (a command)    -> run that command (debugging)
#
# Every flag may also come from RENDER_SERVICE_<FLAG> (e.g. RENDER_SERVICE_WORKERS=4). MODEL is a
# short alias of RENDER_SERVICE_MODEL (a folder on a mounted volume, or a hub id); neither set
# means the embedded default model. Variables set to "" are removed first: Kubernetes and
# `docker run -e X=` produce them, and "" is not "unset" to the CLI (an empty model path).
set -eu

if [ -n "${MODEL:-}" ] && [ -z "${RENDER_SERVICE_MODEL:-}" ]; then
  export RENDER_SERVICE_MODEL="$MODEL"
fi
for name in $(env | sed -n 's/^\(RENDER_SERVICE_[A-Za-z0-9_]*\)=$/\1/p'); do
  unset "$name"
done

case "${1:-}" in
  serve | gateway) ;;
  "" | -*) set -- serve "$@" ;;
  *)
    if [ ! -d "$1" ] && command -v "$1" >/dev/null 2>&1; then
      exec "$@"
    fi
    set -- serve "$@"
    ;;
esac
exec render-service "$@"
