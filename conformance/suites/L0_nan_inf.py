"""qa/L0_nan_inf/test.sh: an output holding NaN, Infinity and -Infinity — over HTTP as JSON (the
answer must be valid JSON), over HTTP as binary and over gRPC (the values must arrive as they are).

One server run, as test.sh, with nan_inf_test.py's three tests. Substitution: the suite's
`nan_inf_output` is a Python-backend model whose model.py answers every request with the FP32
tensor [nan, inf, -inf, 1, 2, 3] whatever its input. It stands in as an ONNX model of the same
name, inputs and outputs (INPUT0 FP32 [-1], OUTPUT0 FP32 [6]) whose graph is that constant: what
the suite tests is how the server encodes such values, not the Python backend. The recipe writes
the model with the onnx package of the model generators' environment (pinned to what the bundled
ONNX Runtime reads), and the suite's config.pbtxt with `platform: "onnxruntime_onnx"` in place of
`backend: "python"`.

The test's `np.NINF` is gone from numpy 2 (the harness's environment has numpy 2; Triton's QA
image pins numpy<2): the test processes get a `sitecustomize` that puts back numpy 1's alias
`numpy.NINF = -numpy.inf`, the test file itself unchanged.
"""
import os
import subprocess

TEST = "nan_inf_test.py"
MODEL = "nan_inf_output"

# model.py's answer as an ONNX graph: OUTPUT0 = Constant([nan, inf, -inf, 1, 2, 3]); INPUT0 is
# the graph's input, as the configuration says, and unused, as model.py leaves it.
_GENERATE = r"""
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

value = numpy_helper.from_array(np.array([np.nan, np.inf, -np.inf, 1, 2, 3], dtype=np.float32), "value")
node = helper.make_node("Constant", [], ["OUTPUT0"], value=value)
graph = helper.make_graph(
    [node], "nan_inf_output",
    [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, [-1])],
    [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, [6])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
"""


# numpy 1's alias, which numpy 2 removed and nan_inf_test.py uses (Triton's image has numpy<2).
_SITECUSTOMIZE = """import numpy
if not hasattr(numpy, "NINF"):
    numpy.NINF = -numpy.inf
"""


def run(suite):
    env = suite.env
    p = suite.path

    shim = suite.dir.parent.parent / "numpy1_aliases"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    pythonpath = os.pathsep.join(x for x in (str(shim), suite.test_env.get("PYTHONPATH", "")) if x)

    d = p("models", MODEL)
    (d / "1" / "model.py").unlink()
    subprocess.run([env.models.python, "-c", _GENERATE, str(d / "1" / "model.onnx")], check=True,
                   capture_output=True)
    config = d / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "python"', 'platform: "onnxruntime_onnx"'))

    with suite.block("nan_inf_output", quick=True) as b:
        b.start([f"--model-repository={p('models')}"])
        b.unittest(TEST, env={"PYTHONPATH": pythonpath})
