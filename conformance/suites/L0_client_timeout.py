"""qa/L0_client_timeout/test.sh: client-side timeouts — a gRPC call whose deadline passes fails
with "Deadline Exceeded", an HTTP request whose network timeout passes fails with a socket
timeout, a gRPC stream whose deadline passes ends, and the same calls with room enough succeed.

Block by block as test.sh, in its order. `custom_identity_int32` (Triton's C++ `identity` test
backend with `execute_delay_ms: 3000`) is Nereus's bundled `identity` plugin, which honours the
parameter. The non-inference blocks run with `TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC=2` in
the server's environment, tritonserver's testing hook that holds every non-inference gRPC
response back that many seconds (Nereus honours it too). test.sh's last server run names
`--log-verbose` twice; the last one counts, as in tritonserver.

Skipped: the runs of the C++ client `qa/clients/client_timeout_test` (built in Triton's QA image
from triton-inference-server/client; not a Python test, and no Python example of the same job
stands in — client_infer_timeout_test.py and client_non_infer_timeout_test.py cover the same
calls from the Python client), and the CUDA shared-memory registration test (needs an NVIDIA GPU
and CUDA's IPC handles).
"""
from harness.core import test_names

INFER_TEST = "client_infer_timeout_test.py"
NON_INFER_TEST = "client_non_infer_timeout_test.py"
MODEL = "custom_identity_int32"
DELAY = {"TRITONSERVER_SERVER_DELAY_GRPC_RESPONSE_SEC": "2"}
CPP = ("the C++ client qa/clients/client_timeout_test (built from triton-inference-server/client in "
       "Triton's QA image); the Python tests of the suite make the same calls")
CUDA = "needs an NVIDIA GPU (CUDA shared memory: cudaIpcGetMemHandle)"


def run(suite):
    p = suite.path
    p("models", MODEL, "1").mkdir(parents=True, exist_ok=True)
    models = f"--model-repository={p('models')}"

    # --- test.sh's C++ client runs (non-inference APIs, then each inference API with a short
    # and a long timeout): the client is not built here.
    for case in ("grpc non-infer APIs, short timeout", "grpc non-infer APIs, long timeout",
                 "grpc infer, short timeout", "grpc async infer, short timeout",
                 "grpc stream infer, short timeout", "http infer, short timeout",
                 "http async infer, short timeout", "grpc infer, long timeout",
                 "grpc async infer, long timeout", "grpc stream infer, long timeout",
                 "http infer, long timeout", "http async infer, long timeout"):
        suite.skip(f"test.sh: client_timeout_test (C++) {case}", CPP)

    # --- the inference APIs with the Python client: the model takes 3 s, the client waits less
    with suite.block("infer APIs", quick=True) as b:
        b.start([models, "--log-verbose", "2"])
        b.unittest(INFER_TEST, [f"ClientInferTimeoutTest.{t}" for t in (
            "test_grpc_infer", "test_grpc_async_infer", "test_grpc_stream_infer", "test_http_infer",
            "test_http_async_infer")])

    # --- every API but inference, with the server's gRPC responses held back 2 s (Python client) -----
    # test.sh's SERVER_ARGS here name --log-verbose twice (the infer block's flags and its own);
    # the last one counts, as in tritonserver.
    args = [models, "--log-verbose", "2", "--model-control-mode=explicit", "--allow-client-shm=true",
            f"--load-model={MODEL}", "--log-verbose", "2"]
    with suite.block("non-infer APIs, delayed gRPC responses") as b:
        b.start(args, extra_env=DELAY)
        for t in test_names(suite.qa_dir / NON_INFER_TEST):
            if t.endswith("test_grpc_register_cuda_shared_memory"):
                b.skip(f"{NON_INFER_TEST} {t}", CUDA)
            else:
                b.unittest(NON_INFER_TEST, t)
