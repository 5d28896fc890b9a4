#!/usr/bin/env bash
# The test command (README, second command). Installs what the tests need, then runs them:
#   .venv            render-service with its test extra
#   .cache/vllm-*    vLLM 0.32 CPU engine and the vLLM 0.33 reference (see .ci/install_vllm.sh)
# Extra arguments go to pytest, e.g. `tests/run.sh -k parsers -x`.
# Two phases: the tests that start no vLLM engine, one pytest worker per core (whole files per
# worker, `--dist loadfile`, so a module's fixtures start once; xdist 3.8's loadgroup ignores
# its groups under pytest 9, which keeps node ids elsewhere); then the `engine` tests alone, as
# their timing needs (an idle P/D pair keeps both cores busy). RS_TEST_WORKERS=1 runs
# everything in one process.
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
cores=$(nproc); workers=${RS_TEST_WORKERS:-$(( cores > 4 ? 4 : cores ))}
case " $* " in *" -m "*|*" -m"*) workers=1 ;; esac  # the caller's own marker selection: one run
if [ "$workers" -le 1 ]; then exec .venv/bin/python -m pytest "$@"; fi
# Processes a phase left behind (a worker that did not exit, a reference server a crashed
# fixture never stopped) would take cores and memory from the next phase: every process of a
# phase inherits its RS_TEST_PHASE mark, so what still has it afterwards is listed and killed.
reap_phase() {
  local mark=$1 pid
  for env in /proc/[0-9]*/environ; do
    pid=${env#/proc/}; pid=${pid%/environ}
    if [ "$pid" != $$ ] && { tr '\0' '\n' < "$env"; } 2>/dev/null | grep -qx "RS_TEST_PHASE=$mark"; then
      echo "left behind by the $mark phase, killed: $pid $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-160)"
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
}
rc=0
# Two glibc arenas per process: the workers' threads otherwise fragment memory into one arena
# each, and two workers with their reference processes near a 24 GB machine's limit.
RS_TEST_PHASE=no-engine-$$ MALLOC_ARENA_MAX=2 .venv/bin/python -m pytest -n "$workers" --dist loadfile --max-worker-restart=0 -m "not engine" "$@" || rc=$?
reap_phase "no-engine-$$"
erc=0
.venv/bin/python -m pytest -m engine "$@" || erc=$?
# 5 is "no tests collected": fine in one phase when a selection (-k, a path) leaves the other.
if [ "$rc" -eq 5 ] && [ "$erc" -ne 5 ]; then rc=0; fi
if [ "$erc" -eq 5 ] && [ "$rc" -ne 5 ]; then erc=0; fi
if [ "$rc" -ne 0 ]; then exit "$rc"; fi
exit "$erc"
