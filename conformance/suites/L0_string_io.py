"""qa/L0_string_io/test.sh: BYTES tensors round-trip unchanged — eight strings sent as numpy
object, `bytes_` and fixed-width `|S78` arrays (decimal strings, integers, and byte strings that
are not UTF-8) over gRPC and over HTTP with binary and JSON input and output; where HTTP carries
non-UTF-8 bytes as JSON (binary_data=False either way) the request must fail.

One server run, as test.sh, with string_client_test.py's one test. test.sh copies
`onnx_zero_1_object` (Triton's generated qa_identity_model_repository; the test does not use it)
and `qa/python_models/string_identity` with its dims `[ 1 ]` changed to `[ 8 ]`. Substitution:
`string_identity` is a Python-backend model handing INPUT0 back as OUTPUT0 (BYTES); Nereus's
bundled `identity` plugin stands in for it under that name (the suite's configuration with
`backend: "identity"` in place of `backend: "python"`, test.sh's `[ 8 ]`, no model.py): what the
test checks is how the server carries BYTES elements through both protocols, not the Python
backend.
"""
import shutil

TEST = "string_client_test.py"


def run(suite):
    env = suite.env
    p = suite.path
    suite.reset("models")
    models = p("models")
    env.models.copy("qa_identity_model_repository", "onnx_zero_1_object", models)
    target = models / "string_identity"
    shutil.copytree(suite.qa_dir.parent / "python_models" / "string_identity", target)
    (target / "model.py").unlink()
    (target / "1").mkdir()
    config = target / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "python"', 'backend: "identity"')
                      .replace("[ 1 ]", "[ 8 ]"))

    with suite.block("string_identity", quick=True) as b:
        b.start([f"--model-repository={models}"])
        b.unittest(TEST, "ClientStringTest.test_unicode_bytes")
