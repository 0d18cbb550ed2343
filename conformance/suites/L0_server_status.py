"""qa/L0_server_status/test.sh: the server's and the models' metadata, readiness and statistics
over HTTP and gRPC — the server's name, version and extensions; an unknown model and an unknown
version refused with tritonserver's message; every version of a model and its inputs and outputs
in the metadata; which versions a version policy makes ready and which have inference statistics;
then, with the repository polled (`--model-control-mode=poll --repository-poll-secs=1`), versions
deleted from the repository gone and a version added there served.

One server run, as test.sh: ServerMetadataTest's five tests, then test.sh's edits of the repository
(versions 2 and 3 of `libtorch_int32_int32_int32` and `onnx_int32_int32_int32` removed, version 1 of
`plan_float16_float32_float32` copied to version 7), a wait until polling has applied them (test.sh
sleeps 3 s), and ModelMetadataTest's four tests. Each test is its own process, in the order
unittest runs a class's tests (by name), since the statistics a later test reads are what the
earlier ones left.

The models are Triton's generated ONNX `qa_model_repository` (gen_qa_models.py --onnx). The tests
also name PyTorch and TensorRT models of it (`libtorch_int32_int8_int8`,
`libtorch_{float32_float32_float32,int32_int32_int32}`,
`plan_{float32_float32_float32,int32_int32_int32,float16_float32_float32}`): the ONNX model of the
same datatypes stands in under each name (harness/models.py: standin; the same versions, version
policy and I/O, platform `onnxruntime_onnx`, from which the test helpers pick the output names).
What the tests check of them — names, versions, readiness, statistics, polling — does not depend on
the framework. The repository's BF16 ONNX models (`onnx_bf16_bf16_bf16`, `onnx_nobatch_bf16_bf16_bf16`)
are left out: ONNX Runtime's CPU provider has no BF16 `Add`, so they fail to load and the server
would not be ready (test.sh runs with a GPU, where they load; Triton's own L0_infer_variable
removes them likewise for its CPU runs). No test names them.

Skipped: ServerMetadataTest.test_model_latest_infer, which asserts that
`plan_int32_int32_int32`'s metadata names the platform `tensorrt_plan` (a TensorRT engine; the
stand-in's is `onnxruntime_onnx`) before it reaches the ONNX model; and
ModelMetadataTest.test_infer_stats_no_model, which counts the statistics of every ready version of
Triton's whole repository (144, from its ONNX, PyTorch, TorchScript AOTI, OpenVINO and TensorRT
models), which an ONNX repository with stand-ins for the models the tests name does not reproduce.
"""
import json
import shutil

from harness.core import http, test_names, wait_until

TEST = "server_status_test.py"
REPO = "qa_model_repository"
STANDINS = ("libtorch_int32_int8_int8", "libtorch_float32_float32_float32", "libtorch_int32_int32_int32",
            "plan_float32_float32_float32", "plan_int32_int32_int32", "plan_float16_float32_float32")
SKIPS = {
    "ServerMetadataTest.test_model_latest_infer":
        "asserts that plan_int32_int32_int32's platform is tensorrt_plan (a TensorRT engine; its ONNX "
        "stand-in's is onnxruntime_onnx) before it reaches the ONNX model",
    "ModelMetadataTest.test_infer_stats_no_model":
        "counts the statistics of every ready version of Triton's whole qa_model_repository (144: its "
        "ONNX, PyTorch, TorchScript AOTI, OpenVINO and TensorRT models); the ONNX repository with "
        "stand-ins for the models the tests name has other models",
}


def _ready_versions(name: str) -> set[str]:
    status, body = http("POST", "/v2/repository/index", b"{}")
    assert status == 200, body
    return {m.get("version") for m in json.loads(body) if m.get("name") == name and m.get("state") == "READY"}


def run(suite):
    env = suite.env
    p = suite.path
    suite.reset("models")
    models = p("models")
    env.models.copy_all((REPO,), models)
    for m in models.glob("onnx_*bf16*"):  # no CPU kernel for BF16 Add
        shutil.rmtree(m)
    for name in STANDINS:
        env.models.standin(name, models, REPO)

    def tests(cls):
        return sorted(t for t in test_names(suite.qa_dir / TEST) if t.startswith(cls + "."))

    with suite.block("poll", quick=True) as b:
        b.start(["--repository-poll-secs=1", "--model-control-mode=poll", f"--model-repository={models}"])
        for t in tests("ServerMetadataTest"):
            if t in SKIPS:
                b.skip(f"{TEST} {t}", SKIPS[t])
            else:
                b.unittest(TEST, t)

        if b:
            for name in ("libtorch_int32_int32_int32", "onnx_int32_int32_int32"):
                for v in ("2", "3"):
                    shutil.rmtree(models / name / v)
            shutil.copytree(models / "plan_float16_float32_float32" / "1", models / "plan_float16_float32_float32" / "7")

        def polled():
            wait_until("the repository poll to apply test.sh's edits", lambda: (
                _ready_versions("libtorch_int32_int32_int32") == {"1"}
                and _ready_versions("onnx_int32_int32_int32") == {"1"}
                and _ready_versions("plan_float16_float32_float32") == {"7"}))
        b.check("the repository poll applies the deleted and added versions", polled)

        for t in tests("ModelMetadataTest"):
            if t in SKIPS:
                b.skip(f"{TEST} {t}", SKIPS[t])
            else:
                b.unittest(TEST, t)
