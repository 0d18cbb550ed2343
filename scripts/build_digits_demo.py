"""Builds the image-classification demo's classifier and test images (run by scripts/build-digits-demo.sh).

No pretrained weights can be downloaded, so the classifier is trained here, on the handwritten digits
dataset that ships inside scikit-learn (8×8 images, grey levels 0–16): a one-hidden-layer perceptron
(64 → 32 → 10), written to ONNX with the `onnx` package as
    PIXELS FP32 [batch, 1, 8, 8] (ink intensity 0–1) → Flatten → Gemm → Relu → Gemm → Softmax
    → PROBABILITIES FP32 [batch, 10]
and checked against scikit-learn's own predictions through onnxruntime.

Test images: for each digit, a held-out sample (never trained on) drawn dark-on-light at 32×32 and
saved as PNG or JPEG (grey or RGB), chosen so that the pipeline — decoded, averaged back to 8×8 and
inverted as the `image_preprocess` step does (simulated here with numpy) — classifies it correctly.
Their labels go to tests/images/digits/expected.json.

Usage: python build_digits_demo.py MODEL_ONNX_PATH IMAGES_DIR
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
SCALE = 4  # 8×8 → 32×32


def train():
    digits = load_digits()
    x = digits.data.astype(np.float32) / 16.0
    x_train, x_test, y_train, y_test, _, i_test = train_test_split(
        x, digits.target, np.arange(len(x)), test_size=0.25, random_state=0, stratify=digits.target)
    clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=2000, random_state=0)
    clf.fit(x_train, y_train)
    print(f"held-out accuracy: {clf.score(x_test, y_test):.4f} on {len(y_test)} images", file=sys.stderr)
    return clf, digits, x_test, y_test, i_test


def to_onnx(clf):
    (w1, w2), (b1, b2) = clf.coefs_, clf.intercepts_
    tensor = lambda name, a: numpy_helper.from_array(np.asarray(a, dtype=np.float32), name)
    nodes = [
        helper.make_node("Flatten", ["PIXELS"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "W1", "B1"], ["hidden"]),
        helper.make_node("Relu", ["hidden"], ["active"]),
        helper.make_node("Gemm", ["active", "W2", "B2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["PROBABILITIES"], axis=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("PIXELS", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("PROBABILITIES", TensorProto.FLOAT, ["batch", 10])],
        [tensor("W1", w1), tensor("B1", b1), tensor("W2", w2), tensor("B2", b2)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="nereus")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def preprocess(path):
    """What the image_preprocess step does: grey (luma), 4×4 box average, inverted, 0–1."""
    grey = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64) @ np.array([0.299, 0.587, 0.114])
    boxes = grey.reshape(8, SCALE, 8, SCALE).mean(axis=(1, 3))
    return (1.0 - boxes / 255.0).astype(np.float32).reshape(1, 1, 8, 8)


def main():
    model_path, images = sys.argv[1], sys.argv[2]
    clf, digits, x_test, y_test, i_test = train()
    model = to_onnx(clf)
    os.makedirs(os.path.dirname(model_path), exist_ok=True)
    onnx.save(model, model_path)
    session = onnxruntime.InferenceSession(model_path)
    ours = session.run(["PROBABILITIES"], {"PIXELS": x_test.reshape(-1, 1, 8, 8)})[0]
    np.testing.assert_allclose(ours, clf.predict_proba(x_test), rtol=1e-4, atol=1e-6)

    os.makedirs(images, exist_ok=True)
    expected = {}
    for digit in range(10):
        ext = "png" if digit % 2 == 0 else "jpg"
        mode = "RGB" if digit in (2, 3) else "L"
        name = f"digit_{digit}.{ext}"
        for row in np.flatnonzero(y_test == digit):
            grey = np.round(255.0 - digits.images[i_test[row]] * 255.0 / 16.0).astype(np.uint8)
            image = Image.fromarray(np.kron(grey, np.ones((SCALE, SCALE), dtype=np.uint8))).convert(mode)
            path = os.path.join(images, name)
            image.save(path, quality=95) if ext == "jpg" else image.save(path)
            probabilities = session.run(["PROBABILITIES"], {"PIXELS": preprocess(path)})[0][0]
            if int(np.argmax(probabilities)) == digit:
                expected[name] = {"label": WORDS[digit], "class": digit, "dataset_index": int(i_test[row])}
                break
        else:
            raise SystemExit(f"no held-out {digit} survives the pipeline")
    with open(os.path.join(images, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2, sort_keys=True)
        f.write("\n")
    print(f"wrote {model_path} and {len(expected)} images to {images}", file=sys.stderr)


if __name__ == "__main__":
    main()
