"""qa/L0_input_validation/test.sh: the server's checks of a request's inputs before a model sees
them — a required input missing (with and without optional ones in the model), a model whose
inputs are all optional asked with none, an input whose data is larger than its shape says, a BYTES
input with fewer or more elements than its shape says — and of the model name a load names (path
traversal, empty or whitespace-only names refused; a valid name of no model fails as not found).

Three server runs, as test.sh, each with its pytest class (`input_validation_test.py::<Class>`):
InputValTest against the suite's `models/`, InputShapeTest against those models and test.sh's additions
(`pt_identity`, `onnx_object_int32_int32`; its two TensorRT models are not made) with
`--allow-client-shm=true`, ModelNameValidationTest against an empty repository in explicit
model control with `--log-verbose=1`.

Substitutions:
- The suite's `input_all_required`, `input_optional` and `input_all_optional` are Python-backend
  models that answer any request with OUTPUT0 = [1]. Nereus's bundled `identity` plugin stands in
  (their configurations with `backend: "identity"` in place of `backend: "python"`, no model.py):
  the error cases are refused by the server before the model runs; `input_all_optional` asked with
  no inputs answers OUTPUT0 (the plugin's zeros for a left-out optional INPUT0, FP32 [1]), and the
  test reads only the output's name.
- `pt_identity`, a TorchScript `torch.nn.Identity()` that test.sh writes with pip's torch (PyTorch
  backend, FP32 [8], max_batch_size 8, dynamic batching), is the `identity` plugin under that name
  with test.sh's configuration (`backend: "identity"` in place of `backend: "pytorch"`): the test
  checks the server's input byte-size check, and one request that passes.
- `onnx_object_int32_int32` is Triton's generated ONNX model, as test.sh copies it.

Skipped: InputShapeTest.test_wrong_input_shape_tensor_size (TensorRT shape-tensor models
`plan_nobatch_zero_1_float32_int32` and `plan_zero_1_float32_int32` from
qa_shapetensor_model_repository: shape tensors are a TensorRT feature, and no ONNX model has one to
stand in), and test.sh's C++ unit-test binaries `input_byte_size_test` and `tensor_size_test`
(built against tritonserver's in-process C API, libtritonserver.so).
"""
import shutil

TEST = "input_validation_test.py"
PYTHON_MODELS = ("input_all_required", "input_optional", "input_all_optional")
PT_IDENTITY = """name: "pt_identity"
backend: "identity"
max_batch_size: 8
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [8]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [8]
  }
]
# ensure we batch requests together
dynamic_batching {
    max_queue_delay_microseconds: 1000000
}
"""
TRT = ("needs TensorRT shape-tensor models (plan_nobatch_zero_1_float32_int32, "
       "plan_zero_1_float32_int32 of qa_shapetensor_model_repository): shape tensors are a TensorRT "
       "feature no ONNX model has")
CPP = ("a C++ unit-test binary of test.sh (built against tritonserver's in-process C API, "
       "libtritonserver.so)")


def run(suite):
    env = suite.env
    p = suite.path
    models = p("models")
    for name in PYTHON_MODELS:
        model = models / name
        shutil.rmtree(model / "1")
        (model / "1").mkdir()
        config = model / "config.pbtxt"
        config.write_text(config.read_text().replace('backend: "python"', 'backend: "identity"'))

    with suite.block("InputValTest", quick=True) as b:
        b.start([f"--model-repository={models}"])
        b.pytest(TEST, select="InputValTest")

    (models / "pt_identity" / "1").mkdir(parents=True)
    (models / "pt_identity" / "config.pbtxt").write_text(PT_IDENTITY)
    env.models.copy("qa_model_repository", "onnx_object_int32_int32", models)
    with suite.block("InputShapeTest") as b:
        b.start([f"--model-repository={models}", "--allow-client-shm=true"])
        b.pytest(TEST, select="InputShapeTest and not test_wrong_input_shape_tensor_size")
        b.skip(f"{TEST} InputShapeTest.test_wrong_input_shape_tensor_size", TRT)

    suite.skip("test.sh: input_byte_size_test (C++)", CPP)
    suite.skip("test.sh: tensor_size_test (C++)", CPP)

    suite.reset("test_models")
    with suite.block("ModelNameValidationTest") as b:
        b.start([f"--model-repository={p('test_models')}", "--model-control-mode=explicit", "--log-verbose=1"])
        b.pytest(TEST, select="ModelNameValidationTest")
