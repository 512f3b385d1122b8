#!/usr/bin/env bash
# Shared by demo.sh and test.sh: make .venv with hookdump installed (editable), plus EXTRA (e.g. "[test]").
# Skipped when this checkout already installed it so, with the same pyproject.toml (.venv/.hookdump-setup
# says so): demo.sh runs inside the test suite, and a reinstall would replace .venv/bin/hookdump under the
# tests that run beside it (pytest -n).
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
if [ ! -x .venv/bin/python ]; then
  "${PYTHON:-python3}" -m venv .venv
fi
# (Asked of the installed packages' metadata: importing torch to see that it is there takes seconds.)
if ! .venv/bin/python -c "import importlib.metadata as m; m.version('torch'); m.version('torchvision')" 2>/dev/null; then
  # A matching pair: a mismatched torch/torchvision makes `import timm` fail.
  .venv/bin/python -m pip install -q torch==2.14.1 torchvision==0.29.1
fi
# `check` exits 0 when nothing is to do; `record` notes the install just made.
stamp() {
  .venv/bin/python - "$1" "$extra" <<'PY'
import hashlib, sys
from pathlib import Path

what, extra = sys.argv[1:]
stamp = Path(".venv/.hookdump-setup")
key = f"{Path.cwd().resolve()} {hashlib.sha256(Path('pyproject.toml').read_bytes()).hexdigest()} "
lines = stamp.read_text().splitlines() if stamp.is_file() else []
ours = [line for line in lines if line.startswith(key)]  # another checkout's install replaced ours
if what == "check":
    extras = {line[len(key):] for line in ours}
    sys.exit(0 if Path(".venv/bin/hookdump").is_file() and (extra in extras or (not extra and extras)) else 1)
stamp.write_text("".join(f"{line}\n" for line in dict.fromkeys([*ours, key + extra])))
PY
}
if ! stamp check; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".${extra}"
  stamp record
fi
# hookdump's bytecode, as pip writes it for an installed package (a no-op once it is up to date): where
# PYTHONDONTWRITEBYTECODE is set, every process would compile the editable checkout again, ~0.2 s of CPU.
.venv/bin/python -m compileall -q hookdump
