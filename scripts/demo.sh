#!/usr/bin/env bash
# The seed report's job on the bundled photo: find the layer, see why `pos_block` never fires, capture the right one.
# Writes only to OUT (default: a new temporary folder), never into the checkout, so it runs any number of times.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
hd=.venv/bin/hookdump
out="${1:-$(mktemp -d "${TMPDIR:-/tmp}/hookdump-demo.XXXXXX")/out}"
echo "== hookdump list-modules alt_gvt_large (pos_block and its children)"
$hd list-modules alt_gvt_large | grep -E "pos_block|modules,"
echo
echo "== hookdump capture --layer pos_block (a ModuleList: refused, with the fix)"
$hd capture --sample --layer pos_block -o "$out" || echo "(exit code $?)"
echo
echo "== hookdump capture --layer pos_block.3.proj.0 --sample -o $out"
$hd capture --sample --layer pos_block.3.proj.0 -o "$out" --overwrite
