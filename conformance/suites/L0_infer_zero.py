"""qa/L0_infer_zero/test.sh: tensors with zero-sized dimensions in every position — batch size 1
and 8, one and three inputs, FP32, FP16, BYTES and BOOL — through ONNX models and ensembles of
them (simple, sequence and fan-out shapes of ensemble).

The models are Triton's generated `qa_identity_model_repository` (gen_qa_identity_models.py) and
`qa_ensemble_model_repository/qa_identity_model_repository` (its --ensemble run), whose `nop_*`
steps are Triton's C++ `identity` test backend: Nereus's bundled `identity` plugin stands in (the
same backend name). test.sh leaves BACKENDS at the test's default, "onnx libtorch"; the recipe runs
it with BACKENDS=onnx, as Nereus has no PyTorch backend (the libtorch halves of each test would
only find their models missing).
"""
import shutil


def run(suite):
    env = suite.env
    p = suite.path
    suite.reset("models")
    for repo in ("qa_identity_model_repository", "qa_ensemble_model_repository/qa_identity_model_repository"):
        for model in env.models.repository(repo).iterdir():
            if model.name.startswith("plan_compatible"):
                continue
            shutil.copytree(model, p("models", model.name), dirs_exist_ok=True)
    # create_nop_version_dir
    for nop in p("models").glob("nop_*"):
        (nop / "1").mkdir(exist_ok=True)
    with suite.block("onnx and ensembles", quick=True) as b:
        b.start([f"--model-repository={p('models')}"])
        b.unittest("infer_zero_test.py", env={"BACKENDS": "onnx"})
