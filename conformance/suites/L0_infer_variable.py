"""qa/L0_infer_variable/test.sh: inference with variable-sized dimensions (`-1` in `dims`) —
FP32, INT32, INT64 and BYTES inputs and outputs of each shape the request brings, raw outputs and
classification (class_count), over HTTP and gRPC (streaming too), through non-batching and
batching models and through ensembles (simple, sequence and fan-out shapes) of them.

The models are Triton's generated `qa_variable_model_repository` (gen_qa_models.py --onnx
--variable) and `qa_ensemble_model_repository/qa_variable_model_repository` (its --ensemble
--variable run), whose `nop_*` steps are Triton's C++ `identity` test backend: Nereus's bundled
`identity` plugin stands in (the same backend name).

The test has no variable choosing frameworks: besides the ONNX models it asks for the TensorRT
(`plan_*`, FP32 and INT32, and the ensembles over them) and PyTorch (`libtorch_*`) models of the
same datatypes. Each is the ONNX model of the same datatypes under that name (harness/models.py:
standin): gen_qa_models.py gives every framework's variable model the same dims, batching and
I/O, and the test's checks (shapes, values, classification) are the server's. The ensembles over
PyTorch models map their steps' tensors by PyTorch's names (INPUT__0); over the ONNX stand-in
they are ONNX's (INPUT0), as in L0_lifecycle.

test.sh runs the test twice, with every ONNX and PyTorch model on the CPU (KIND_CPU, without the
BF16 models) and then on the GPU (KIND_GPU); the GPU pass needs an NVIDIA GPU (and ONNX Runtime's
CUDA library) and is skipped without one.
"""
import re
import shutil

from harness.core import test_names
from harness.gpu import has_gpu

TEST = "infer_variable_test.py"
REPO = "qa_variable_model_repository"
ENSEMBLES = "qa_ensemble_model_repository/qa_variable_model_repository"
GPU = "needs an NVIDIA GPU (test.sh's TARGET=gpu pass: every ONNX and PyTorch model KIND_GPU)"


def _models(suite, target):
    env = suite.env
    p = suite.path
    suite.reset("models")
    models = p("models")
    env.models.copy_all((REPO, ENSEMBLES), models)
    if target == "cpu":  # Remove ONNX BF16 models from CPU models
        for m in models.glob("onnx_*bf16*"):
            shutil.rmtree(m)
    # The TensorRT and PyTorch models the ensembles run (the same the test asks for itself).
    steps = set()
    for config in models.glob("*/config.pbtxt"):
        text = config.read_text()
        if 'platform: "ensemble"' not in text:
            continue
        steps.update(re.findall(r'model_name: "((?:plan|libtorch)_[^"]*)"', text))
        if "libtorch" in config.parent.name:
            config.write_text(re.sub(r'key: "(INPUT|OUTPUT)__(\d+)"', r'key: "\1\2"', text))
    for name in sorted(steps):
        if not (models / name).exists():
            env.models.standin(name, models, REPO)
    for nop in models.glob("nop_*"):  # create_nop_version_dir
        (nop / "1").mkdir(exist_ok=True)
    kind = "KIND_CPU" if target == "cpu" else "KIND_GPU"
    for fw in ("onnx", "libtorch"):
        for config in models.glob(f"{fw}*/config.pbtxt"):
            with open(config, "a") as f:
                f.write(f"instance_group [ {{ kind: {kind} }}]\n")
    return models


def run(suite):
    gpu = has_gpu()
    for target in ("cpu", "gpu"):
        with suite.block(target, quick=target == "cpu") as b:
            if not b:
                continue
            if target == "gpu" and not gpu:
                suite.skip_tests(TEST, test_names(suite.qa_dir / TEST), GPU, target)
                continue
            models = _models(suite, target)
            b.start([f"--model-repository={models}", "--exit-timeout-secs=120"])
            b.unittest(TEST)
