"""Writes the large-tensor benchmark's ONNX models into bench/model_repository (run with the `onnx`
package: python bench/tensors/make_models.py; the outputs are committed):

- identity_fp32_onnx/1: OUTPUT0 = INPUT0, FP32 [batch, n];
- reduce_sum_fp32_onnx/1: OUTPUT0 = ReduceSum(INPUT0, axes=[-1], keepdims=1), FP32 [batch, n] -> [batch, 1].

The Wasm twins are the bundled `identity` and `reduce_sum` plugins (identity_fp32, reduce_sum_fp32).
"""
import os

import onnx
from onnx import TensorProto, helper

repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model_repository")
fp32 = TensorProto.FLOAT


def save(name, nodes, output_shape, initializers=()):
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("INPUT0", fp32, ["batch", "n"])],
        [helper.make_tensor_value_info("OUTPUT0", fp32, output_shape)],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    onnx.save(model, os.path.join(repo, name, "1", "model.onnx"))


save("identity_fp32_onnx", [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])], ["batch", "n"])
save(
    "reduce_sum_fp32_onnx",
    [helper.make_node("ReduceSum", ["INPUT0", "axes"], ["OUTPUT0"], keepdims=1)],
    ["batch", 1],
    [helper.make_tensor("axes", TensorProto.INT64, [1], [-1])],
)
