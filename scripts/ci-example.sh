#!/usr/bin/env bash
# What a CI job that uses hookdump looks like: a pre-flight check, a capture from a preset in configs/, the
# shapes read from the manifest (python, and jq when present), a job that fails on a layer that never
# fires, and golden activations diffed against a new capture. Writes only to a temporary folder.
# HOOKDUMP=path/to/hookdump overrides the venv's console script.
set -euo pipefail
cd "$(dirname "$0")/.."
hd="${HOOKDUMP:-.venv/bin/hookdump}"
py="${PYTHON:-.venv/bin/python}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== pre-flight: --dry-run fails where the capture would, before any real work"
"$hd" capture --config configs/twins-pos-block.toml -o "$work/out" --dry-run

echo "== capture from the preset; the manifest is the JSON on stdout"
"$hd" capture --config configs/twins-pos-block.toml -o "$work/out" --json --quiet > "$work/manifest.json"

echo "== shapes from the manifest"
"$py" - "$work/manifest.json" <<'PY'
import json, sys

manifest = json.load(open(sys.argv[1]))
shapes = {t["file"]: t["shape"] for t in manifest["tensors"]}
assert manifest["complete"] and shapes == {"pos_block.3.proj.0.npy": [1, 1024, 7, 7]}, shapes
print("python:", shapes)
PY
if command -v jq >/dev/null 2>&1; then
  jq -e '.tensors[0].shape == [1, 1024, 7, 7]' "$work/manifest.json" >/dev/null
  echo "jq: $(jq -c '[.tensors[] | {file, shape}]' "$work/manifest.json")"
fi

echo "== a layer that never fires fails the job: exit 3, and a JSON error a script can read"
set +e
"$hd" capture --config configs/twins-pos-block.toml -l pos_block -o "$work/bad" --json > "$work/error.json"
code=$?
set -e
"$py" - "$work/error.json" "$code" <<'PY'
import json, sys

error, code = json.load(open(sys.argv[1])), int(sys.argv[2])
assert code == 3 and error["kind"] == "layer" and error["exit_code"] == 3, (code, error)
print(f"exit {code}: {error['error']}")
PY
test ! -e "$work/bad"

echo "== golden activations: captured once, then every run diffed against them (exit 1 when a tensor moved)"
"$hd" capture --config configs/golden-resnet18.toml -o "$work/golden" --quiet
"$hd" capture --config configs/golden-resnet18.toml -o "$work/now" --quiet
"$hd" diff "$work/golden" "$work/now"
"$hd" capture --config configs/golden-resnet18.toml --dtype bfloat16 -o "$work/bf16" --quiet
set +e
"$hd" diff "$work/golden" "$work/bf16" --atol 1e-5 --rtol 1e-4 --json > "$work/diff.json"
code=$?
set -e
"$py" - "$work/diff.json" "$code" <<'PY'
import json, sys

found, code = json.load(open(sys.argv[1])), int(sys.argv[2])
assert code == 1 and found["differs"] and found["first_divergence"] == "conv1", (code, found)
print(f"exit {code}: first divergence {found['first_divergence']}")
PY
echo "ci-example: ok"
