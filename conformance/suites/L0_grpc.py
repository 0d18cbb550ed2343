"""qa/L0_grpc/test.sh: the gRPC frontend — Triton's Python client examples over gRPC (health,
infer, async, asyncio and streaming infer, strings, sequences, system shared memory, keepalive,
custom channel arguments, explicit contents of each kind, reused request objects), duplicate
output names and many-element BYTES contents (python_unit_test.py GrpcTest), compressed requests
and responses (--grpc-infer-response-compression-level), model control, the asyncio client's
calls, the grpc.health.v1 service, and restricted protocols (--grpc-restricted-protocol).

Models: L0_http's twin (harness/examples.py): test.sh serves `models/`, Triton's docs/examples
models, here Triton's own ONNX files (simple, simple_dyna_sequence, simple_int8, simple_sequence,
simple_string) and Nereus's `simple_identity` stand-in. test.sh also adds
`simple_string_dyna_sequence` (Triton's C++ `dyna_sequence` test backend) to `models/`, which also
holds densenet_onnx, a download: neither is stood in for what it does (the image clients and the
sequence examples' `-d` runs are skipped), but the repository index must count test.sh's eight
models (the model-control example and python_grpc_aio_test.py check it) and every model must load
(tritonserver does not start when one fails). So `models/` gets placeholders that load under those
names: `simple` as densenet_onnx and `simple_dyna_sequence` as simple_string_dyna_sequence, with
their names changed and nothing else.

`grpc_test_models/string_identity` is a Python-backend model in Triton (qa/python_models/
string_identity: INPUT0 back as OUTPUT0, BYTES); the `identity` plugin stands in for it under that
name, with test.sh's `dims: [ -1 ]`.

Other substitutions:
- `grpc-health-probe` (which test.sh installs with `go install`) is re-expressed with grpcio: the
  same `grpc.health.v1.Health/Check` call, with no server (the call must fail to connect) and with
  one (the answer must be SERVING).
- Skipped: the C++ example clients and `cc_client_test` (not built here), the image clients
  (densenet_onnx is a download), the CUDA shared-memory example, `grpc_client.py` and
  `grpc_image_client.py` (examples of triton-inference-server/client not among the copies in
  tests/python/triton_client_examples), the client plugin test (its `client_plugin_test` model is a
  Python-backend model checking the headers the server forwards under test.sh's
  `--grpc-header-forward-pattern=.*`, a flag Nereus does not take) and the basic authentication
  test (an nginx proxy in front of that server).
"""
import shutil

from harness.core import grep_count, test_names
from harness.examples import (CUDA_SHM_SKIP, CXX_SKIP, DYNA_SKIP, IMAGE_SKIP, NGINX_SKIP,
                              NGINX_TODO, add_placeholders, ensure, example, example_models,
                              refused_restrictions)

UNIT_TEST = "python_unit_test.py"
AIO_TEST = "python_grpc_aio_test.py"
EXAMPLE_MODELS = ("simple", "simple_dyna_sequence", "simple_int8", "simple_sequence", "simple_string")
NOT_COPIED = ("an example of triton-inference-server/client not among the copies in "
              "tests/python/triton_client_examples")
PYTHON_BACKEND = "needs {}, a Python-backend model (Nereus has no Python backend)"
# test.sh's loop of Python examples, in its order: (file, skip reason or None).
EXAMPLES = (
    ("simple_grpc_aio_infer_client.py", None),
    ("simple_grpc_aio_sequence_stream_infer_client.py", None),
    ("simple_grpc_infer_client.py", None),
    ("simple_grpc_async_infer_client.py", None),
    ("simple_grpc_string_infer_client.py", None),
    ("image_client.py -m densenet_onnx (async, streaming and sync)", IMAGE_SKIP),
    ("simple_grpc_sequence_stream_infer_client.py", None),
    ("simple_grpc_sequence_sync_infer_client.py", None),
    ("simple_grpc_shm_string_client.py", None),
    ("simple_grpc_shm_client.py", None),
    ("simple_grpc_cudashm_client.py", CUDA_SHM_SKIP),
    ("simple_grpc_keepalive_client.py", None),
    ("simple_grpc_custom_args_client.py", None),
    ("grpc_explicit_byte_content_client.py", None),
    ("grpc_explicit_int_content_client.py", None),
    ("grpc_explicit_int8_content_client.py", None),
    ("grpc_client.py", NOT_COPIED),
    ("grpc_image_client.py -m densenet_onnx", NOT_COPIED),
)
CXX_CLIENTS = ("simple_grpc_infer_client", "simple_grpc_string_infer_client",
               "simple_grpc_async_infer_client", "simple_grpc_health_metadata",
               "simple_grpc_sequence_stream_infer_client", "simple_grpc_sequence_sync_infer_client",
               "simple_grpc_shm_client", "simple_grpc_cudashm_client", "image_client",
               "simple_grpc_keepalive_client", "simple_grpc_custom_args_client",
               "reuse_infer_objects_client")


def run(suite):
    models = example_models(suite, EXAMPLE_MODELS)
    add_placeholders(models)
    repo = f"--model-repository={models}"
    clients_block(suite, repo)
    unit_test_block(suite, models)
    suite.skip_tests("grpc_client_plugin_test.py",
                     test_names(suite.qa_dir / "grpc_client_plugin_test.py"),
                     PYTHON_BACKEND.format("client_plugin_test (client_plugin_models/)"))
    suite.skip("grpc_basic_auth_test.py", NGINX_TODO if shutil.which("nginx") else NGINX_SKIP)
    compression_block(suite, repo)
    model_control_block(suite, models)
    suite.skip("simple_grpc_model_control (C++)", CXX_SKIP)
    for name in ("simple_grpc_sequence_stream_infer_client.py", "simple_grpc_sequence_sync_infer_client.py"):
        suite.skip(f"{name} -d", DYNA_SKIP)
    for name in ("simple_grpc_sequence_stream_infer_client", "simple_grpc_sequence_sync_infer_client"):
        suite.skip(f"{name} -d (C++)", CXX_SKIP)
    suite.skip("cc_client_test GRPC*:-*Load*", CXX_SKIP)
    for t in ("LoadWithFileOverride", "LoadWithConfigOverride"):
        suite.skip(f"cc_client_test GRPC*{t}", CXX_SKIP)

    with suite.block("python asyncio client", quick=True) as b:
        b.start([repo, "--allow-client-shm=true"])
        b.unittest(AIO_TEST)

    health_probe_blocks(suite, repo)
    restricted_blocks(suite, repo)


def clients_block(suite, repo):
    """test.sh's first server: the Python examples, each exiting 0 with one PASS line."""
    env = suite.env

    def passed(p):
        return p.returncode == 0 and p.stdout.count("PASS") == 1

    with suite.block("client examples", quick=True) as b:
        b.start([repo, "--allow-client-shm=true"])
        b.command("simple_grpc_health_metadata.py",
                  [env.python, example(env, "simple_grpc_health_metadata.py"), "-v"])
        for name, skip in EXAMPLES:
            if skip:
                b.skip(name, skip)
            else:
                b.command(name, [env.python, example(env, name), "-v"], ok=passed)
        b.command("reuse_infer_objects_client.py -i grpc",
                  [env.python, example(env, "reuse_infer_objects_client.py"), "-v", "-i", "grpc",
                   "-u", "localhost:8001"])
        for name in CXX_CLIENTS:
            b.skip(f"{name} (C++)", CXX_SKIP)


def unit_test_block(suite, models):
    """GrpcTest against grpc_test_models: `simple` and the string_identity stand-in."""
    ut = suite.path("grpc_test_models")
    suite.reset("grpc_test_models")
    shutil.copytree(models / "simple", ut / "simple")
    (ut / "string_identity" / "1").mkdir(parents=True)
    (ut / "string_identity" / "config.pbtxt").write_text(
        "# Stands in for qa/python_models/string_identity (a Python-backend model), with test.sh's\n"
        "# dims: [ -1 ]: INPUT0 back as OUTPUT0.\n"
        'name: "string_identity"\nbackend: "identity"\nmax_batch_size: 0\n'
        'input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]\n')
    with suite.block("duplicate outputs and bytes_contents") as b:
        b.start([f"--model-repository={ut}"])
        b.unittest(UNIT_TEST, [t for t in test_names(suite.qa_dir / UNIT_TEST) if t.startswith("GrpcTest.")])


def compression_block(suite, repo):
    """A deflate-compressed request, and responses compressed at the server's level; grpc core's
    `compression` trace (GRPC_TRACE) prints `Compressed[deflate]` in the client's output."""
    env = suite.env
    with suite.block("compression") as b:
        b.start([repo, "--grpc-infer-response-compression-level=high"])
        b.skip("simple_grpc_infer_client -C deflate (C++)", CXX_SKIP)
        trace = {"GRPC_TRACE": "compression, channel", "GRPC_VERBOSITY": "DEBUG"}
        b.command("simple_grpc_infer_client.py -C deflate",
                  [env.python, example(env, "simple_grpc_infer_client.py"), "-v", "-C", "deflate"],
                  env=trace, ok=lambda p: p.returncode == 0 and "Compressed[deflate]" in p.stdout)


def model_control_block(suite, models):
    """The Python model-control example in EXPLICIT mode; the server logs the invalid override."""
    env = suite.env
    with suite.block("model control", quick=True) as b:
        b.start([f"--model-repository={models}", "--model-control-mode=explicit"])
        b.command("simple_grpc_model_control.py",
                  [env.python, example(env, "simple_grpc_model_control.py"), "-v"],
                  ok=lambda p: p.returncode == 0 and p.stdout.count("PASS") == 1)
        b.check("the server logs 'Invalid config override'",
                lambda: ensure(grep_count(b.log, "Invalid config override", False) > 0, "not logged"))


HEALTH_CHECK = "/grpc.health.v1.Health/Check"


def _health_check(timeout: float = 5.0) -> bytes:
    """grpc-health-probe's call: an empty HealthCheckRequest; the raw HealthCheckResponse."""
    import grpc
    with grpc.insecure_channel("localhost:8001") as channel:
        check = channel.unary_unary(HEALTH_CHECK)
        return check(b"", timeout=timeout)


def health_probe_blocks(suite, repo):
    """grpc-health-probe with no server (it must fail to connect), then with one (SERVING)."""
    import grpc

    with suite.block("health probe, no server") as b:
        def offline():
            try:
                _health_check(timeout=2.0)
            except grpc.RpcError as e:
                ensure(e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED),
                       f"failed with {e.code()}, not a connection failure")
            else:
                raise AssertionError("a server answered")
        b.check("the health probe fails to connect", offline)

    with suite.block("health probe") as b:
        b.start([repo])
        # HealthCheckResponse { status: SERVING (1) }: field 1, varint 1.
        b.check("the health probe says SERVING",
                lambda: ensure(_health_check() == b"\x08\x01", f"answered {_health_check()!r}"))


def restricted_blocks(suite, repo):
    refused_restrictions(suite, repo, "grpc-restricted-protocol", "protocol")
    with suite.block("restricted protocols", quick=True) as b:
        b.start([repo, "--grpc-restricted-protocol=model-repository:admin-key=admin-value",
                 "--grpc-restricted-protocol=inference,health:infer-key=infer-value"])
        b.unittest(UNIT_TEST, [t for t in test_names(suite.qa_dir / UNIT_TEST)
                               if t.startswith("RestrictedProtocolTest.")])
