"""qa/L0_parameters/test.sh: request parameters of every type reach the model over HTTP and gRPC
(sync, async, streaming) and through an ensemble's steps; `triton_` keys and the reserved names are
refused; request headers become parameters under `--http-header-forward-pattern` and
`--grpc-header-forward-pattern` (a reserved header name fails the request); and the
classification extension (`class_count`) over both protocols.

One server per test, as test.sh. Substitutions:
- The suite's `parameter` model, a Python-backend model answering with its request's parameters
  as the BYTES outputs `key` and `value`, is Nereus's `parameter` plugin (plugins/parameter), the
  same answer, served from a `--backend-directory`; its configuration, which the Python model
  auto-completes, is written out as the model would complete it.
- Triton's C++ `identity` test backend (the ensemble's first step) is Nereus's bundled `identity`
  plugin; the classification test's `identity_fp32` and `identity_bytes`, Python-backend
  identities, are that plugin too (backend "identity" instead of "python").
"""
from harness.core import install_standin_plugin

TEST = "parameters_test.py"
CLASS_TEST = "class_count_test.py"
PARAMETER_CONFIG = """name: "parameter"
backend: "parameter"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "key" data_type: TYPE_STRING dims: [ -1 ] }, { name: "value" data_type: TYPE_STRING dims: [ -1 ] } ]
"""


def run(suite):
    p = suite.path
    models = p("model_repository")
    for m in ("identity", "ensemble"):
        (models / m / "1").mkdir(parents=True, exist_ok=True)
    py = models / "parameter" / "1" / "model.py"
    if py.exists():
        py.unlink()
    (models / "parameter" / "config.pbtxt").write_text(PARAMETER_CONFIG)
    backends = p("backends")
    install_standin_plugin("parameter", backends)

    flags = {
        "test_params": [],
        "test_params_reserved_rejected": [],
        "test_headers": ["--grpc-header-forward-pattern", "MY_HEADER.*", "--http-header-forward-pattern", "MY_HEADER.*"],
        "test_grpc_header_forward_pattern_case_sensitive": ["--grpc-header-forward-pattern", "(?-i)MY_HEADER.*"],
        "test_headers_reserved_rejected": ["--grpc-header-forward-pattern", ".*", "--http-header-forward-pattern", ".*"],
    }
    for test, extra in flags.items():
        with suite.block(test, quick=test in ("test_params", "test_headers_reserved_rejected")) as b:
            b.start([f"--model-repository={models}", f"--backend-directory={backends}", "--exit-timeout-secs=120",
                     *extra])
            b.unittest(TEST, f"InferenceParametersTest.{test}")

    # The classification extension: identity models asked for class_count=5.
    class_models = p("models")
    suite.reset("models")
    source = suite.qa_dir.parent / "python_models" / "identity_fp32" / "config.pbtxt"
    config = source.read_text().replace('backend: "python"', 'backend: "identity"')
    for name, text in (("identity_fp32", config),
                       ("identity_bytes", config.replace("identity_fp32", "identity_bytes").replace("TYPE_FP32", "TYPE_STRING"))):
        (class_models / name / "1").mkdir(parents=True, exist_ok=True)
        (class_models / name / "config.pbtxt").write_text(text)
    for protocol in ("http", "grpc"):
        with suite.block(f"class_count {protocol}") as b:
            b.start([f"--model-repository={class_models}", "--log-verbose=1"])
            b.unittest(CLASS_TEST, [f"ClassificationParameterTest.{t}" for t in (
                "test_classificattion", "test_classificattion_unsupported_data_type",
                "test_classification_output_tensor_too_large")], env={"CLIENT_TYPE": protocol})
