"""qa/L0_optional_input/test.sh: optional inputs — a request may leave them out; the dynamic batcher
batches only requests that provide the same inputs (a request with a different set sends the batch
at once); ensembles pass optional inputs on, also to a step whose connecting tensors the request
did not produce.

The suite's own models (its models/ folder), served as test.sh serves them, one server per
test. Triton's C++ `identity` test backend (identity_2_float32) is Nereus's bundled `identity`
plugin; `optional_identity`, a Python-backend model whose model.py copies each input it gets to
its output, is the same `identity` plugin (backend "identity" instead of "python").
"""
from harness.core import test_names

TEST = "optional_input_test.py"


def run(suite):
    p = suite.path
    for m in ("identity_2_float32", "ensemble_identity_2_float32", "pipeline_identity_2_float32",
              "optional_connecting_tensor"):
        p("models", m, "1").mkdir(parents=True, exist_ok=True)
    py = p("models", "optional_identity", "1", "model.py")
    if py.exists():
        py.unlink()
    config = p("models", "optional_identity", "config.pbtxt")
    config.write_text(config.read_text().replace('backend: "python"', 'backend: "identity"'))
    for test in test_names(suite.qa_dir / TEST):
        with suite.block(test.split(".")[-1], quick=test.endswith("pipeline")) as b:
            b.start([f"--model-repository={p('models')}", "--log-verbose=1"])
            b.unittest(TEST, test)
