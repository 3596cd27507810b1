#!/usr/bin/env bash
# Set everything up and run every test and quality gate (the README's test command; .ci/run calls it).
#   bash scripts/test.sh            # provision, gates, fast tier, full tier, real-SGLang tier
#   bash scripts/test.sh --fast     # gates and fast tier only (no Go tools needed)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_phases.sh

fast_only=false
[ "${1:-}" = "--fast" ] && fast_only=true

if $fast_only; then
  phase "provision (python only)" python3 tools/provision.py --skip-go
else
  phase "provision (venv + real tools)" python3 tools/provision.py
  # The real SGLang server (issue 39): its own virtualenv (~11 GB, ~5 min cold), the tiny model,
  # the CPU shims; reused while tools/versions.toml and tools/sglang/ are unchanged.
  phase "provision: real SGLang (own venv, tiny model, shims)" python3 tools/sglang_env.py
fi
PY=.venv/bin
# pytest workers (pytest-xdist), one module per worker at a time: two for the fast tier; three for
# the full tier, whose tests wait on real processes (the engine, the apiserver, pods starting) for
# much of their time: with two, the cores sat 23 % idle and the tier took 818 s; with three, 10 %
# and 682 s; with the CLI modules spread over the workers (their user venv built once, shared)
# and programs no longer importing the provider's work, 467 s (2026-12-06). TEST_WORKERS=N sets
# both (0: this process).
workers=(-n "${TEST_WORKERS:-2}")
full_workers=(-n "${TEST_WORKERS:-3}")
phase "gate: ruff check" "$PY/ruff" check .
phase "gate: ruff format --check" "$PY/ruff" format --check .
phase "gate: mypy --strict" "$PY/mypy"
phase "gate: import layers (import-linter)" "$PY/lint-imports"
# Bytecode is written and reused. Container images often set PYTHONDONTWRITEBYTECODE=1 (this
# machine's does): then every pytest worker and every process a test starts (the provider, the
# loop, the CLI, a Pulumi program) compiled the package from source again, and the fast tier took
# 28-35 s instead of 23 s (2026-12-08, two cores). __pycache__ is git-ignored.
unset PYTHONDONTWRITEBYTECODE
# A clone's first run compiles every module of the package and the tests (and pytest rewrites the
# tests' asserts) in each worker; a developer's next run finds them in __pycache__. Done here once,
# apart from the tier, so the tier's time is the tests' own.
warm() {
  local out
  out=$("$PY/python" -m compileall -q pulumi_lora 2>&1 \
    && "$PY/pytest" --collect-only -q -o addopts="" 2>&1) || { echo "$out" >&2; return 1; }
}
phase "warm: bytecode and assertion rewriting (compileall, pytest --collect-only)" warm
budget 40  # issue 12: the fast tier stays within 40 s
phase "tests: fast tier" "$PY/pytest" -m "not full" -q "${workers[@]}"
if ! $fast_only; then
  budget 720  # issue 12: the full tier within 12 minutes on two cores, tools built
  phase "tests: full tier (real engine, apiserver, etcd)" "$PY/pytest" -m "full and not sglang" -q --durations=15 "${full_workers[@]}"
  budget 480  # issue 39: the real SGLang server's tier (about 6.7 min: six real servers start)
  phase "tests: real SGLang tier" "$PY/pytest" -m sglang -q --durations=10 -s
fi
phase_summary
