"""qa/L0_scalar_io/test.sh: ONNX models with rank-0 (scalar) inputs and outputs, served with
`dims: [ 1 ]` (Triton's generated qa_scalar_models, gen_qa_ort_scalar_models.py); then the same
repository with `onnx_scalar_1dim`'s dims changed to [2], which must not load.

test.sh relies on tritonserver's default --exit-on-error=true for its second run ("Expected the
server to fail loading"); Nereus defaults to false (docs/compatibility.md), so the recipe passes
--exit-on-error=true to ask the same question.
"""
import re
import shutil


def run(suite):
    p = suite.path
    suite.reset("models")
    src = suite.env.models.repository("qa_scalar_models")
    for model in src.iterdir():
        shutil.copytree(model, p("models", model.name))
    models = f"--model-repository={p('models')}"
    with suite.block("scalar models", quick=True) as b:
        b.start([models])
        b.unittest("scalar_test.py")
    with suite.block("a scalar with dims [2]") as b:
        config = p("models", "onnx_scalar_1dim", "config.pbtxt")
        config.write_text(re.sub(r"dims.*", "dims:[2]", config.read_text()))
        server = b.start([models, "--exit-on-error=true"], wait="ready", expect_failure=True)
        b.check("the server fails to load the model and exits", lambda: _refused(b, server))


def _refused(block, server):
    if server is not None:
        block.stop(server)
        raise AssertionError("the server started")
