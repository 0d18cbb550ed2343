"""qa/L0_infer/test.sh: inference across datatypes, shapes, batching and not, ensembles (simple,
sequence, fan-out, labels, mixed types, batching to non-batching and back), classification
(class_count), over HTTP and gRPC; and the same with inputs and outputs in system shared memory
(TEST_SYSTEM_SHARED_MEMORY=1, as Triton's CI runs it).

As test.sh with BACKENDS=onnx on a CPU-only machine (TRITON_SERVER_CPU_ONLY=1: the TARGET=gpu
pass is skipped, as test.sh skips it there; the TensorRT, PyTorch, OpenVINO and Python-backend
runs need frameworks Nereus does not have): Triton's generated `qa_model_repository` ONNX models
and their ensembles (`qa_ensemble_model_repository`), the suite's `ensemble_models` that need only
ONNX, and `custom_zero_1_float32`, whose C++ `identity` backend Nereus's bundled `identity`
plugin stands in for, edited as test.sh edits them.
"""
import shutil

from harness.core import sed

ENSEMBLE_MODELS = ["wrong_label_int32_float32_float32", "label_override_int32_float32_float32",
                   "mix_type_int32_float32_float32", "batch_to_nobatch_float32_float32_float32",
                   "batch_to_nobatch_nobatch_float32_float32_float32",
                   "nobatch_to_batch_float32_float32_float32",
                   "nobatch_to_batch_nobatch_float32_float32_float32",
                   "mix_nobatch_batch_float32_float32_float32"]


def _models(suite):
    """generate_model_repository with BACKENDS=onnx, ENSEMBLES=1, TARGET=cpu."""
    env = suite.env
    p = suite.path
    suite.reset("models")
    models = p("models")
    for model in env.models.repository("qa_model_repository").iterdir():
        if model.name.startswith("onnx") and "bf16" not in model.name:
            shutil.copytree(model, models / model.name)
    ensembles = env.models.repository("qa_ensemble_model_repository/qa_model_repository")
    for model in ensembles.iterdir():
        if "onnx" in model.name or model.name.startswith("nop_"):
            shutil.copytree(model, models / model.name, dirs_exist_ok=True)
    for nop in models.glob("nop_*"):  # create_nop_version_dir
        (nop / "1").mkdir(exist_ok=True)
    for em in ENSEMBLE_MODELS:
        shutil.copytree(suite.env.qa / "ensemble_models" / em, models / em)
        (models / em / "1").mkdir(exist_ok=True)
    for config in models.glob("onnx*/config.pbtxt"):
        with open(config, "a") as f:
            f.write("instance_group [ { kind: KIND_CPU }]\n")
    zero = models / "custom_zero_1_float32"
    shutil.copytree(suite.env.qa / "custom_models" / "custom_zero_1_float32", zero)
    (zero / "1").mkdir(exist_ok=True)
    with open(zero / "config.pbtxt", "a") as f:
        f.write("instance_group [ { kind: KIND_CPU }]\n")
    nobatch = models / "custom_nobatch_zero_1_float32"
    shutil.copytree(zero, nobatch)
    sed(zero / "config.pbtxt", [("max_batch_size: 1", "max_batch_size: 8"), (r"dims: \[ 1 \]", "dims: [ -1 ]")])
    sed(nobatch / "config.pbtxt", [("custom_zero_1_float32", "custom_nobatch_zero_1_float32"),
                                    ("max_batch_size: 1", "max_batch_size: 0"),
                                    (r"dims: \[ 1 \]", "dims: [ -1, -1 ]")])
    return models


def run(suite):
    models = _models(suite)
    env = {"BACKENDS": "onnx", "ENSEMBLES": "1", "NOBATCH": "1", "BATCH": "1", "TRITON_SERVER_CPU_ONLY": "1"}
    args = [f"--model-repository={models}", "--exit-timeout-secs=600"]
    with suite.block("cpu", quick=True) as b:
        b.start(args)
        b.unittest("infer_test.py", env=env)
    with suite.block("cpu, system shared memory") as b:
        b.start(args + ["--allow-client-shm=true"])
        b.unittest("infer_test.py", env={**env, "TEST_SYSTEM_SHARED_MEMORY": "1"})
