"""qa/L0_output_name/test.sh: a request for an output the model does not have is refused over gRPC
with tritonserver's message ("unexpected inference output 'DUMMY' for model …").

The test asks three models, `{libtorch,onnx,plan}_nobatch_zero_1_float32` of Triton's generated
qa_identity_model_repository: the PyTorch and TensorRT ones are the ONNX model under their names
(harness/models.py: standin), since the check is the server's, made before any framework runs.
"""
IDENTITY = "qa_identity_model_repository"


def run(suite):
    p = suite.path
    suite.reset("models")
    for framework in ("libtorch", "onnx", "plan"):
        suite.env.models.standin(f"{framework}_nobatch_zero_1_float32", p("models"), IDENTITY)
    with suite.block("output name", quick=True) as b:
        b.start([f"--model-repository={p('models')}"])
        b.unittest("output_name_test.py", "OutputNameValidationTest")
