#!/usr/bin/env bash
# Set up .venv with the test extra, then lint, type-check and run the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh "[test]"
export HF_HUB_OFFLINE=1   # nothing may reach for the network in tests
.venv/bin/ruff check hookdump tests scripts
.venv/bin/ruff format --check hookdump tests scripts
.venv/bin/mypy hookdump
# Two test processes side by side (pytest-xdist): the suite's time on a 2-core machine is its CPU time, not
# its waiting; HOOKDUMP_TEST_WORKERS=0 runs it in one process.
workers="${HOOKDUMP_TEST_WORKERS:-2}"
if [ "$workers" = 0 ]; then
    .venv/bin/python -m pytest "$@"
else
    .venv/bin/python -m pytest -n "$workers" "$@"
fi
