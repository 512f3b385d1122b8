#!/usr/bin/env bash
# The GPU path of issue 22, checked and measured in a few minutes: CUDA captures equal CPU ones (float32
# and bf16), pinned memory + non-blocking copies on a side stream against blocking ones, decode_jpeg on
# the GPU against PIL, and the dataset benchmark at batch 256 against the bare bf16 forward. Without a CUDA
# device every CUDA part prints "skipped (no CUDA device)" and the script exits 0 (CI runs --quick).
#   scripts/gpu_check.sh [--quick] [--images 2048] [--batch 256]       PYTHON=... overrides the venv's
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-.venv/bin/python}"
exec "$py" scripts/gpu_check.py "$@"
