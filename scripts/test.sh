#!/usr/bin/env bash
# Set up .venv with the test extra, then lint, type-check and run the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# Disk first: the suite holds up to ~2 GB of captures in the temporary folder at once (a passing test's
# folder goes as it ends), and a new .venv takes ~6 GB (torch's CUDA build). Short of that, it would fail
# minutes in with hundreds of "No space left on device" errors.
free_gb() { df -Pk "$1" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'; }
need_disk() {
    if [ "$(free_gb "$1")" -lt "$2" ]; then
        echo "error: the tests need about $2 GB free in $1 ($3); it has $(free_gb "$1") GB." >&2
        echo "  Free some space there, or point TMPDIR at a larger disk." >&2
        exit 1
    fi
}
tmp="${TMPDIR:-/tmp}"
need_disk "$tmp" 3 "the captures the tests write"
[ -x .venv/bin/python ] || need_disk . 8 "a new .venv with torch"
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
