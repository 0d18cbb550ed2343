"""qa/L0_infer_reshape/test.sh: the `reshape` of a model's inputs and outputs — tensors the client
sends and receives in the configuration's `dims`, handed to the model in the `reshape` shape and
back — with and without batching, fixed and variable-sized dimensions, FP32, INT32 and BYTES,
through ONNX models and ensembles (simple, sequence and fan-out shapes) of `nop` steps.

The models are Triton's generated `qa_reshape_model_repository` (gen_qa_reshape_models.py --onnx
--variable) and `qa_ensemble_model_repository/qa_reshape_model_repository` (its --ensemble run),
with test.sh's `custom_*` copies; their C++ `identity` test backend, and the ensembles' `nop_*`
steps', is Nereus's bundled `identity` plugin (the same backend name).

The test has no variable choosing frameworks: besides the ONNX models it asks for the PyTorch ones
(`libtorch_*`, FP32 and BYTES) and, in test_ff2 and test_ff4, TensorRT ones (`plan_*`). The
PyTorch models are the ONNX model of the same name's rest under theirs (harness/models.py:
standin): the same `dims` the client sees, the same batching, reshaped by the server from and to
those dims (the PyTorch models reshape [1] to [1, 1, 1] where the ONNX ones reshape it to [], a
difference only inside the model). The TensorRT models have no ONNX counterpart to stand in:
test_ff2 asks for a non-batching two-input model the ONNX set does not have, test_ff4 for outputs
reshaped to other shapes ([2, 2, 4], [1, 2, 1], [1, 1, 1]) than the ONNX model's; those two tests
are skipped.
"""
import shutil

TEST = "infer_reshape_test.py"
REPO = "qa_reshape_model_repository"
ENSEMBLES = "qa_ensemble_model_repository/qa_reshape_model_repository"
# test.sh's `custom_*` copies of ONNX models, served by the identity backend.
CUSTOM = ["nobatch_zero_3_float32", "nobatch_zero_4_float32", "zero_1_float32", "zero_2_float32",
          "zero_3_float32", "zero_4_float32", "nobatch_zero_1_int32", "nobatch_zero_2_int32",
          "nobatch_zero_3_int32", "zero_1_int32", "zero_2_int32", "zero_3_int32"]
# The PyTorch models the test asks for (gen_qa_reshape_models.py's create_libtorch_models).
LIBTORCH = ["zero_1_float32", "zero_2_float32", "zero_3_float32", "nobatch_zero_3_float32",
            "zero_4_float32", "nobatch_zero_4_float32", "zero_1_object"]
TRT = ("needs TensorRT reshape models (plan_*) besides the ONNX ones: a non-batching "
       "plan_nobatch_zero_2_float32 and plan_*_zero_4_float32 whose outputs are reshaped to "
       "[2, 2, 4], [1, 2, 1], [1, 1, 1], which no generated ONNX model has to stand in")


def run(suite):
    env = suite.env
    p = suite.path
    suite.reset("models")
    models = p("models")
    env.models.copy_all((REPO, ENSEMBLES), models)
    for i in CUSTOM:
        custom = models / f"custom_{i}"
        shutil.copytree(models / f"onnx_{i}", custom)
        for f in (custom / "1").iterdir():
            f.unlink() if f.is_file() else shutil.rmtree(f)
        config = custom / "config.pbtxt"
        lines = []
        for line in config.read_text().split("\n"):
            if line.startswith("platform:"):
                line = 'backend: "identity"'
            elif line.startswith("name:"):
                line = f'name: "custom_{i}"'
            lines.append(line)
        config.write_text("\n".join(lines) + "instance_group [ { kind: KIND_CPU }]\n")
    for i in LIBTORCH:
        env.models.standin(f"libtorch_{i}", models, REPO)
    for nop in models.glob("nop_*"):  # create_nop_version_dir
        (nop / "1").mkdir(exist_ok=True)

    with suite.block("onnx and ensembles", quick=True) as b:
        b.start([f"--model-repository={models}"])
        for test in ("InferReshapeTest.test_ff1", "InferReshapeTest.test_ff3", "InferReshapeTest.test_ii1",
                     "InferReshapeTest.test_ii2", "InferReshapeTest.test_ii3", "InferReshapeTest.test_oo1"):
            b.unittest(TEST, test)
        for test in ("InferReshapeTest.test_ff2", "InferReshapeTest.test_ff4"):
            b.skip(f"{TEST} {test}", TRT)
