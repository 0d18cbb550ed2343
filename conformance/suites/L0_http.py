"""qa/L0_http/test.sh: the HTTP/REST frontend — Triton's Python client examples over HTTP (health,
infer, async and asyncio infer, strings, system shared memory, sequences, model control), a URL
with a base path, binary and JSON outputs chosen per output and per request, malformed JSON data,
raw binary requests (Inference-Header-Content-Length: 0), chunked requests, overflowing shapes,
deeply nested JSON, the asyncio client's calls, the generate extension, restricted APIs
(--http-restricted-api), input size limits (--http-max-input-size) and requests of many chunks.

Models: test.sh serves `models/`, which Triton's QA image fills with its docs/examples models
(simple, simple_dyna_sequence, simple_identity, simple_sequence, simple_string, densenet_onnx),
and to which test.sh adds simple_string_dyna_sequence; harness/examples.py prepares it as for
L0_grpc. The ONNX ones are Triton's own files (tests/onnx_models/, unchanged); `simple_identity` is
a Python-backend model in Triton (BYTES back unchanged), for which Nereus's example of the same
name (model_repository/simple_identity, the `identity` Wasm plugin) stands in. `densenet_onnx` is
a download (docs/examples/fetch_models.sh) not available here, and `simple_string_dyna_sequence`
is Triton's C++ `dyna_sequence` test backend, not stood in: the image client and the sequence
examples' `-d` runs are skipped, and both names are placeholders that load (renamed copies of
`simple` and `simple_dyna_sequence`), so that the repository index counts test.sh's seven models
(the model-control example and python_http_aio_test.py check it).

Other substitutions:
- The Python client examples test.sh runs from `../clients/` (copied there from
  triton-inference-server/client in Triton's image) are the same files in
  tests/python/triton_client_examples/ (unchanged).
- The C++ example clients, `cc_client_test` (a gtest of the C++ client library) and the basic
  authentication test (an nginx proxy in front of the server, when nginx is not installed) are
  skipped; so is the CUDA shared-memory example.
- The generate extension's `mock_llm` is a Python-backend model: the `mock_llm` plugin
  (plugins/mock_llm, built by conformance/run.sh) does the same from a backend directory.
- test.sh's curl checks of binary and JSON outputs are re-expressed with Python's urllib.
"""
import json
import shutil

from harness.core import grep_count, http, install_standin_plugin
from harness.examples import (CUDA_SHM_SKIP, CXX_SKIP, DYNA_SKIP, IMAGE_SKIP, NGINX_SKIP,
                              NGINX_TODO, add_placeholders, ensure, example as _example,
                              example_models, refused_block, refused_restrictions)

HTTP_TEST = "http_test.py"
SIZE_TEST = "http_input_size_limit_test.py"
EXAMPLE_MODELS = ("simple", "simple_dyna_sequence", "simple_sequence", "simple_string")


def run(suite):
    models = example_models(suite, EXAMPLE_MODELS)
    add_placeholders(models)
    repo = f"--model-repository={models}"

    def example(name):
        return _example(suite.env, name)

    clients_block(suite, repo, example)
    model_control_block(suite, models, example)
    suite.skip("simple_http_model_control (C++)", CXX_SKIP)
    suite.skip("simple_http_sequence_sync_infer_client -d (C++)", CXX_SKIP)
    suite.skip("simple_http_sequence_sync_infer_client.py -d", DYNA_SKIP)
    binary_json_block(suite, repo)
    suite.skip("cc_client_test HTTP*:-*Load*", CXX_SKIP)
    for t in ("LoadWithFileOverride", "LoadWithConfigOverride"):
        suite.skip(f"cc_client_test HTTP*{t}", CXX_SKIP)

    with suite.block("python asyncio client", quick=True) as b:
        b.start([repo, "--allow-client-shm=true"])
        b.unittest("python_http_aio_test.py")

    unit_test_block(suite)
    generate_block(suite)
    restricted_blocks(suite, repo)
    size_limit_blocks(suite)
    with suite.block("requests of many chunks") as b:
        b.start([repo, "--allow-client-shm=true", "--log-verbose=1", "--model-control-mode=explicit",
                 "--load-model=simple"])
        b.unittest("http_request_many_chunks.py", args=["-v"])


def clients_block(suite, repo, example):
    """test.sh's first server: the Python examples, the base-path URL, the client plugin test."""
    env = suite.env
    with suite.block("client examples", quick=True) as b:
        b.start([repo, "--allow-client-shm=true"])
        b.command("simple_http_health_metadata.py", [env.python, example("simple_http_health_metadata.py"), "-v"])
        for name in ("simple_http_aio_infer_client", "simple_http_infer_client",
                     "simple_http_async_infer_client"):
            b.command(f"{name}.py", [env.python, example(f"{name}.py"), "-v"])
        b.skip("image_client.py -m densenet_onnx (async and sync)", IMAGE_SKIP)
        for name in ("simple_http_shm_string_client", "simple_http_shm_client"):
            b.command(f"{name}.py", [env.python, example(f"{name}.py"), "-v"])
        b.skip("simple_http_cudashm_client.py", CUDA_SHM_SKIP)
        for name in ("simple_http_string_infer_client", "simple_http_sequence_sync_infer_client"):
            b.command(f"{name}.py", [env.python, example(f"{name}.py"), "-v"])
        b.command("reuse_infer_objects_client.py", [env.python, example("reuse_infer_objects_client.py"), "-v"])

        def base_path(p):
            # The server has no /base_path route: the example must fail, having sent it there.
            return p.returncode != 0 and "POST /base_path/v2/models/simple/infer" in p.stdout
        b.command("simple_http_infer_client.py -u localhost:8000/base_path",
                  [env.python, example("simple_http_infer_client.py"), "-u", "localhost:8000/base_path", "-v"],
                  ok=base_path)
        for name in ("simple_http_infer_client", "simple_http_string_infer_client",
                     "simple_http_async_infer_client", "simple_http_health_metadata",
                     "simple_http_shm_client", "simple_http_cudashm_client",
                     "simple_http_sequence_sync_infer_client"):
            b.skip(f"{name} -H test:1 (C++)", CXX_SKIP)
        b.skip("simple_http_string_infer_client --json-input-data --json-output-data (C++)", CXX_SKIP)
        b.skip("reuse_infer_objects_client (C++)", CXX_SKIP)
        b.skip("simple_http_infer_client -u localhost:8000/base_path (C++)", CXX_SKIP)
        b.unittest("http_client_plugin_test.py")
        b.skip("http_basic_auth_test.py", NGINX_TODO if shutil.which("nginx") else NGINX_SKIP)


def model_control_block(suite, models, example):
    """The Python model-control example in EXPLICIT mode; the server logs the invalid override."""
    env = suite.env
    with suite.block("model control", quick=True) as b:
        b.start([f"--model-repository={models}", "--model-control-mode=explicit"])

        def passed(p):
            return p.returncode == 0 and p.stdout.count("PASS") == 1
        b.command("simple_http_model_control.py",
                  [env.python, example("simple_http_model_control.py"), "-v"], ok=passed)
        b.check("the server logs 'Invalid config override'",
                lambda: ensure(grep_count(b.log, "Invalid config override", False) > 0, "not logged"))


SIMPLE_IN = {"inputs": [
    {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(1, 17))},
    {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": list(range(1, 17))}]}
SUM = "[2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32]"
DIFF = "[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]"


def binary_json_block(suite, repo):
    """test.sh's curl requests to `simple`: which outputs come back as JSON, and two malformed
    'data' fields, each answered with tritonserver's message."""
    with suite.block("binary and JSON data", quick=True) as b:
        b.start([repo])

        def infer(extra, want_sum, want_diff):
            def check():
                body = dict(SIMPLE_IN, **extra)
                code, out = http("POST", "/v2/models/simple/infer",
                                 json.dumps(body, separators=(",", ":")).encode())
                assert code == 200, f"{code} {out}"
                assert out.count(SUM) == want_sum, f"sum found {out.count(SUM)} times, want {want_sum}: {out}"
                assert out.count(DIFF) == want_diff, f"difference found {out.count(DIFF)} times, want {want_diff}: {out}"
            return check

        def out(name, binary):
            o = {"name": name}
            if binary is not None:
                o["parameters"] = {"binary_data": binary}
            return o
        b.check("no parameters, no outputs: JSON outputs", infer({}, 1, 1))
        b.check("binary_data true on OUTPUT0, false on OUTPUT1",
                infer({"outputs": [out("OUTPUT0", True), out("OUTPUT1", False)]}, 0, 1))
        b.check("binary_data true on OUTPUT0, not given on OUTPUT1",
                infer({"outputs": [out("OUTPUT0", True), out("OUTPUT1", None)]}, 0, 1))
        b.check("binary_data_output true, no outputs requested",
                infer({"parameters": {"binary_data_output": True}}, 0, 0))
        b.check("binary_data_output true, binary_data false on OUTPUT0, not given on OUTPUT1",
                infer({"parameters": {"binary_data_output": True},
                       "outputs": [out("OUTPUT0", False), out("OUTPUT1", None)]}, 1, 1))

        def bad(n, message):
            def check():
                body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
                                    "data": list(range(1, n + 1))}]}
                code, text = http("POST", "/v2/models/simple/infer",
                                  json.dumps(body, separators=(",", ":")).encode())
                assert code != 200, f"{code} {text}"
                want = json.dumps({"error": message}, separators=(",", ":"))
                assert text.count(want) == 1, f"{want} not in {text}"
            return check
        b.check("15 elements for shape [1,16]: \"Failed to parse 'data' field: shape does not match true shape\"",
                bad(15, "Failed to parse 'data' field: shape does not match true shape"))
        b.check("18 elements for shape [1,16]: \"Unable to parse 'data': Shape does not match true shape of 'data' field\"",
                bad(18, "Unable to parse 'data': Shape does not match true shape of 'data' field"))
        b.check("the server still answers after the bad requests", infer({}, 1, 1))


def unit_test_block(suite):
    """http_test.py against python_unit_test_models, as test.sh builds it."""
    env = suite.env
    p = suite.path
    ut = p("python_unit_test_models")
    suite.reset("python_unit_test_models")
    for m in ("onnx_zero_1_float32", "onnx_zero_1_object", "onnx_zero_1_float16", "onnx_zero_3_float32"):
        env.models.copy("qa_identity_model_repository", m, ut)
    one = ut / "onnx_zero_1_object_1_element"
    shutil.copytree(ut / "onnx_zero_1_object", one)
    cfg = one / "config.pbtxt"
    # sed "s/onnx_zero_1_object/onnx_zero_1_object_1_element/" and "0,/-1/{s/-1/1/}"
    text = cfg.read_text().replace("onnx_zero_1_object", "onnx_zero_1_object_1_element", 1)
    cfg.write_text(text.replace("-1", "1", 1))
    queue = ut / "onnx_zero_1_float32_queue"
    shutil.copytree(ut / "onnx_zero_1_float32", queue)
    cfg = queue / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("onnx_zero_1_float32", "onnx_zero_1_float32_queue", 1) +
                   "dynamic_batching { \n    max_queue_delay_microseconds: 1000000\n"
                   "    preferred_batch_size: [ 8 ]\n    default_queue_policy {\n"
                   "        max_queue_size: 1\n    }\n}\n")
    shutil.copytree(p("models", "simple_identity"), ut / "simple_identity")
    i64 = ut / "simple_identity_int64"
    shutil.copytree(p("models", "simple_identity"), i64)
    cfg = i64 / "config.pbtxt"
    text = cfg.read_text().replace("TYPE_STRING", "TYPE_INT64")
    cfg.write_text(text.replace("simple_identity", "simple_identity_int64"))
    # Not in the quick subset: test_loading_large_invalid_model builds a 2.9 GB request in the
    # test process (about 13 GB of memory, a minute and a half).
    with suite.block("python unit tests") as b:
        b.start([f"--model-repository={ut}", "--model-control-mode=explicit", "--load-model=*"])
        b.unittest(HTTP_TEST)


def generate_block(suite):
    """generate_endpoint_test.py against ../python_models/generate_models, whose `mock_llm` is a
    Python-backend model: the `mock_llm` plugin (plugins/mock_llm, the same behaviour) stands in,
    from a backend directory, in a copy of the folder whose config names it."""
    p = suite.path
    suite.reset("generate_models", "generate_backends")
    models = p("generate_models")
    shutil.copytree(suite.qa_dir.parent / "python_models" / "generate_models" / "mock_llm", models / "mock_llm")
    config = models / "mock_llm" / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "python"', 'backend: "mock_llm"', 1))
    install_standin_plugin("mock_llm", p("generate_backends"))
    with suite.block("generate extension", quick=True) as b:
        b.start([f"--model-repository={models}", f"--backend-directory={p('generate_backends')}",
                 "--log-verbose=1"])
        b.unittest("generate_endpoint_test.py")


def restricted_blocks(suite, repo):
    refused_restrictions(suite, repo, "http-restricted-api", "api")
    with suite.block("restricted apis", quick=True) as b:
        b.start([repo, "--http-restricted-api=model-repository:admin-key=admin-value",
                 "--http-restricted-api=inference,metadata:infer-key=infer-value"])
        b.unittest("http_restricted_api_test.py",
                   [f"RestrictedAPITest.{t}" for t in ("test_sanity", "test_model_repository",
                                                        "test_metadata", "test_infer")])


def size_limit_blocks(suite):
    env = suite.env
    p = suite.path
    limit = p("http_input_size_limit_test_models")
    suite.reset("http_input_size_limit_test_models")
    env.models.copy("qa_identity_model_repository", "onnx_zero_1_float32", limit)
    shutil.copytree(p("models", "simple_identity"), limit / "simple_identity")
    repo = f"--model-repository={limit}"
    with suite.block("default input size limit") as b:
        b.start([repo])
        b.unittest(SIZE_TEST, [f"InferSizeLimitTest.{t}" for t in (
            "test_default_limit_raw_binary", "test_default_limit_json", "test_large_string_in_json",
            "test_default_limit_compressed", "test_json_dtype_size_expansion_exceeds_limit_error",
            "test_no_leak_on_invalid_inference_header_length")])
    with suite.block("increased input size limit") as b:
        b.start([repo, f"--http-max-input-size={2**27}"])
        b.unittest(SIZE_TEST, [f"InferSizeLimitTest.{t}" for t in (
            "test_large_input_raw_binary", "test_large_input_json", "test_large_input_compressed")])
    for label, value in (("zero input size limit", "0"), ("negative input size limit", "-1024")):
        refused_block(suite, label, [repo, f"--http-max-input-size={value}"],
                      "Error: --http-max-input-size must be greater than 0.")

