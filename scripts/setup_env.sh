#!/usr/bin/env bash
# Shared by demo.sh and test.sh: make .venv with hookdump installed (editable), plus EXTRA (e.g. "[test]").
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
fi
if ! .venv/bin/python -c "import torch, torchvision" 2>/dev/null; then
  # A matching pair: a mismatched torch/torchvision makes `import timm` fail.
  .venv/bin/python -m pip install -q torch==2.14.1 torchvision==0.29.1
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".${extra}"
