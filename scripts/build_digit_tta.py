"""Builds `digit_classifier_tta`, the expensive model of the `digit_cascade` example (business logic
scripting, issue 27), from `digit_classifier`'s own weights: no training, no dataset.

Test-time augmentation: the 8×8 image and its four one-pixel shifts (up, down, left, right; the edge
padded with zeros) each go through the same 64-32-10 perceptron, and the five softmax outputs are
averaged. Five times the arithmetic of `digit_classifier` for answers that are steadier on an off-centre
digit: what a cascade calls only when the cheap model is unsure.
    PIXELS FP32 [batch, 1, 8, 8] → PROBABILITIES FP32 [batch, 10]

Usage: python build_digit_tta.py CLASSIFIER_ONNX OUT_ONNX   (needs numpy, onnx, onnxruntime)
"""
import sys

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

source, out = sys.argv[1], sys.argv[2]
base = onnx.load(source)
weights = {i.name: numpy_helper.to_array(i) for i in base.graph.initializer}
init = [numpy_helper.from_array(weights[n], n) for n in ("W1", "B1", "W2", "B2")]
init += [
    numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], dtype=np.int64), "pads"),
    numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "axes"),
    numpy_helper.from_array(np.array([5.0], dtype=np.float32), "count"),
]
nodes = [helper.make_node("Pad", ["PIXELS", "pads"], ["padded"], mode="constant")]
branches = []
for k, (dy, dx) in enumerate([(1, 1), (0, 1), (2, 1), (1, 0), (1, 2)]):
    init += [
        numpy_helper.from_array(np.array([dy, dx], dtype=np.int64), f"start{k}"),
        numpy_helper.from_array(np.array([dy + 8, dx + 8], dtype=np.int64), f"end{k}"),
    ]
    nodes += [
        helper.make_node("Slice", ["padded", f"start{k}", f"end{k}", "axes"], [f"view{k}"]),
        helper.make_node("Flatten", [f"view{k}"], [f"flat{k}"], axis=1),
        helper.make_node("Gemm", [f"flat{k}", "W1", "B1"], [f"hidden{k}"]),
        helper.make_node("Relu", [f"hidden{k}"], [f"active{k}"]),
        helper.make_node("Gemm", [f"active{k}", "W2", "B2"], [f"logits{k}"]),
        helper.make_node("Softmax", [f"logits{k}"], [f"p{k}"], axis=1),
    ]
    branches.append(f"p{k}")
nodes += [
    helper.make_node("Sum", branches, ["total"]),
    helper.make_node("Div", ["total", "count"], ["PROBABILITIES"]),
]
graph = helper.make_graph(
    nodes,
    "digit_classifier_tta",
    [helper.make_tensor_value_info("PIXELS", TensorProto.FLOAT, ["batch", 1, 8, 8])],
    [helper.make_tensor_value_info("PROBABILITIES", TensorProto.FLOAT, ["batch", 10])],
    init,
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="nereus")
model.ir_version = base.ir_version
onnx.checker.check_model(model)
onnx.save(model, out)

# Check: probabilities sum to one, and an unshifted image's answer stays close to the base model's.
rng = np.random.default_rng(7)
x = rng.random((4, 1, 8, 8), dtype=np.float32)
tta = onnxruntime.InferenceSession(out).run(None, {"PIXELS": x})[0]
plain = onnxruntime.InferenceSession(source).run(None, {"PIXELS": x})[0]
assert tta.shape == (4, 10) and np.allclose(tta.sum(axis=1), 1, atol=1e-5), tta
print(f"{out}: ok (mean |tta - plain| = {np.abs(tta - plain).mean():.3f})")
