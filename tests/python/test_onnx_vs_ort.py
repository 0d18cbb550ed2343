"""Builds two small ONNX models with the `onnx` package — an MLP and a CNN, both with a dynamic batch
dimension — serves them with nereus (configurations auto-completed from the models), and checks that
its answers over HTTP and gRPC match onnxruntime run directly in Python (relative tolerance 1e-5).

Usage: python test_onnx_vs_ort.py build REPO        (writes REPO/mlp, REPO/cnn)
       python test_onnx_vs_ort.py check REPO HTTP GRPC
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(7)


def weight(name, *shape):
    return numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.5, name)


def mlp():
    nodes = [
        helper.make_node("MatMul", ["X", "W1"], ["h1"]),
        helper.make_node("Add", ["h1", "B1"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "W2"], ["h4"]),
        helper.make_node("Add", ["h4", "B2"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 3])],
        [weight("W1", 8, 16), weight("B1", 16), weight("W2", 16, 3), weight("B2", 3)],
    )
    return graph, ("X", (8,)), "Y"


def cnn():
    nodes = [
        helper.make_node("Conv", ["X", "K", "KB"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "G", "GB"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])],
        [weight("K", 4, 1, 3, 3), weight("KB", 4), weight("G", 4, 4), weight("GB", 4)],
    )
    return graph, ("X", (1, 8, 8)), "Y"


MODELS = {"mlp": mlp, "cnn": cnn}


def build(repo):
    for name, make in MODELS.items():
        graph = make()[0]
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
        onnx.save(model, os.path.join(repo, name, "1", "model.onnx"))


def check(repo, http_url, grpc_url):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    clients = [(httpclient, httpclient.InferenceServerClient(url=http_url)),
               (grpcclient, grpcclient.InferenceServerClient(url=grpc_url))]
    for name, make in MODELS.items():
        _, (input_name, inner), output_name = make()
        session = onnxruntime.InferenceSession(os.path.join(repo, name, "1", "model.onnx"))
        for batch in (1, 3):
            x = RNG.standard_normal((batch, *inner)).astype(np.float32)
            expected = session.run([output_name], {input_name: x})[0]
            for module, client in clients:
                inp = module.InferInput(input_name, list(x.shape), "FP32")
                inp.set_data_from_numpy(x)
                got = client.infer(name, [inp]).as_numpy(output_name)
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6, err_msg=f"{name} batch {batch}")
    print("ONNX models built with `onnx` match onnxruntime in Python: 1 passed, 0 failed")


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2])
    else:
        check(*sys.argv[2:5])
