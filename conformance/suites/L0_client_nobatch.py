"""qa/L0_client_nobatch/test.sh: the server's check of a request's shape against the model's
batching — a request without the batch dimension to a batching model and one with it to a
non-batching model must fail, over HTTP and gRPC; the right shape to each succeeds.

One server run, as test.sh, against a repository of every `onnx_*` model of Triton's generated
qa_model_repository (test.sh's `cp -r $DATADIR/qa_model_repository/onnx_*`) but its two BF16
models (`onnx_bf16_bf16_bf16`, `onnx_nobatch_bf16_bf16_bf16`: ONNX Runtime's CPU provider has no
BF16 `Add`, so they would fail to load and the server would not be ready; the tests do not use
them), with client_test.py's
four tests (test.sh runs the file once; here each test is its own process and case). No
substitution: the tests use `onnx_int32_int8_int8` and `onnx_nobatch_int32_int8_int8`, Triton's
own ONNX models.
"""
import shutil

TEST = "client_test.py"


def run(suite):
    env = suite.env
    p = suite.path
    suite.reset("qa_model_repository")
    repo = p("qa_model_repository")
    for model in sorted(env.models.repository("qa_model_repository").iterdir()):
        if model.is_dir() and model.name.startswith("onnx_") and "bf16" not in model.name:
            shutil.copytree(model, repo / model.name)

    with suite.block("client_nobatch", quick=True) as b:
        b.start([f"--model-repository={repo}"])
        b.unittest(TEST)
