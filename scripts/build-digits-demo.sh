#!/usr/bin/env bash
# Rebuilds the image-classification demo's classifier (model_repository/digit_classifier/1/model.onnx)
# and its test images (tests/images/digits) from scikit-learn's bundled digits dataset, in a virtualenv
# of its own (scikit-learn, pillow, onnx, onnxruntime from PyPI). Their outputs are committed, so
# serving and testing need no training; run this to reproduce or change them.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${NEREUS_DEMO_VENV:-${CARGO_TARGET_DIR:-$root/target}/demo-venv}
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import sklearn, PIL, onnx, onnxruntime' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check scikit-learn pillow onnx onnxruntime numpy
fi
"$venv/bin/python" "$root/scripts/build_digits_demo.py" \
  "$root/model_repository/digit_classifier/1/model.onnx" "$root/tests/images/digits"
