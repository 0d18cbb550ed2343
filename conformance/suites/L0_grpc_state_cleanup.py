"""qa/L0_grpc_state_cleanup/test.sh: the gRPC frontend's calls and streams ending every way they can
— answered, cancelled by the client, past the client's deadline, refused (a restricted protocol
without its header), cut by a server shutting down (SIGINT in the middle of the run) — for unary
calls (`async_infer`), streams of a plain model, and streams of a decoupled model (ten requests of
ten responses each, with and without `enable_empty_final_response`), and a stream to a model that
is not decoupled whose backend sends more than one response (only the first reaches the client).
In tritonserver each case exercises the C++ call-state objects of its gRPC frontend, and test.sh
counts their creations and releases in the server log.

Block by block as test.sh, in its order, each test its own server run with `--log-verbose=2`:
- ten runs (test_simple_infer ... test_non_decoupled_streaming_multi_response);
- three runs with `--grpc-restricted-protocol=inference:infer-key=infer-value`, whose calls carry no
  such header (the `*_error_status` tests);
- four runs in which the test sends the server SIGINT at its sixth request (`SERVER_PID`, as
  test.sh passes it); test.sh then waits for the server to exit, here a case of its own (within
  tritonserver's default `--exit-timeout-secs` of 30 s, and a margin);
- one run with tritonserver's testing hook TRITONSERVER_DELAY_GRPC_COMPLETE=2000 (which delays its
  stream handler's completion callback to expose a race on its state object; Nereus has no such
  object and ignores it) and test_decoupled_infer_complete, which reads the server log (SERVER_LOG)
  for tritonserver's "Should not print this".

The models, as Triton's QA image and test.sh make them: `custom_zero_1_float32`
(qa/custom_models, with test.sh's `execute_delay_ms` of 1000), `repeat_int32` (Triton's
src/test/models/repeat_int32, which the QA image copies into the suite's `models/`; its
configuration is written here, since the qa folder does not hold it), and
`repeat_int32_non_decoupled` (test.sh's copy without `model_transaction_policy`).

Substitutions: `custom_zero_1_float32` is a model of Triton's C++ `identity` test backend; Nereus's
bundled `identity` plugin serves it, with test.sh's configuration. `repeat_int32` is a model of
Triton's C++ `repeat` backend (`backend: "repeat"`, libtriton_repeat.so); Nereus's bundled
`repeat_int32` plugin (the same inputs IN, DELAY, WAIT and outputs OUT, IDX) stands in, under
`backend: "repeat_int32"`. Triton's repeat backend sends a request's responses from a thread of its
own (repeat_backend src/repeat.cc, ResponseThread) and holds its instance only for WAIT, so the ten
requests of a stream, 10 s of DELAY each, overlap on its one instance; the plugin sends them from
its instance's execute, so the stand-in gets ten instances (the most requests a test has in flight
at once) and a `sandbox.execution_timeout_ms` of 60 s (a request takes 10.5 s, over the 10 s
default).

Skipped: test.sh's check_state_release after each run, which compares the numbers of "StateNew" and
"StateRelease" lines in the server log: tritonserver's gRPC frontend logs them (verbose 2,
src/grpc/infer_handler.h) for each C++ call-state object it creates and releases; Nereus's gRPC
frontend has no such objects and logs neither line, so the check (0 = 0) would say nothing.
"""
import shutil
import time

TEST = "cleanup_test.py"
CLEANUP = "CleanUpTest"

# Triton's src/test/models/repeat_int32/config.pbtxt.
REPEAT_INT32 = """name: "repeat_int32"
backend: "repeat"
max_batch_size: 0
model_transaction_policy {
  decoupled: True
}
input [
  {
    name: "IN"
    data_type: TYPE_INT32
    dims: [ -1 ]
  },
  {
    name: "DELAY"
    data_type: TYPE_UINT32
    dims: [ -1 ]
  },
  {
    name: "WAIT"
    data_type: TYPE_UINT32
    dims: [ 1 ]
  }
]
output [
  {
    name: "OUT"
    data_type: TYPE_INT32
    dims: [ 1 ]
  },
  {
    name: "IDX"
    data_type: TYPE_UINT32
    dims: [ 1 ]
  }
]
"""
# The stand-in: the bundled repeat_int32 plugin, ten instances, a 60 s sandbox limit (the docstring
# says why).
STANDIN = ('instance_group [ { kind: KIND_CPU count: 10 } ]\n'
           'parameters [ { key: "sandbox.execution_timeout_ms" value: { string_value: "60000" } } ]\n')


def _standin(text):
    return text.replace('backend: "repeat"', 'backend: "repeat_int32"') + STANDIN


PLAIN = ["test_simple_infer", "test_simple_infer_cancellation", "test_simple_infer_timeout",
         "test_streaming_infer", "test_streaming_timeout", "test_streaming_cancellation",
         "test_decoupled_infer", "test_decoupled_cancellation", "test_decoupled_timeout",
         "test_non_decoupled_streaming_multi_response"]
ERROR_STATUS = ["test_simple_infer_error_status", "test_streaming_error_status",
                "test_decoupled_error_status"]
SHUTDOWN = ["test_simple_infer_shutdownserver", "test_streaming_infer_shutdownserver",
            "test_decoupled_infer_shutdownserver", "test_decoupled_infer_with_params_shutdownserver"]
# tritonserver's default --exit-timeout-secs, and a margin.
EXIT_WAIT = 30 + 15

STATE_RELEASE_REASON = (
    "tritonserver's gRPC frontend logs \"StateNew\" and \"StateRelease\" (verbose 2, "
    "src/grpc/infer_handler.h) for each C++ call-state object it creates and releases; Nereus's "
    "gRPC frontend has no such objects and logs neither line, so the check (0 = 0) would say nothing")


def _models(suite):
    models = suite.path("models")
    suite.reset("models")
    # cp -r ../custom_models/custom_zero_1_float32 ./models/.; mkdir 1; execute_delay_ms 1000
    zero = models / "custom_zero_1_float32"
    shutil.copytree(suite.env.qa / "custom_models" / "custom_zero_1_float32", zero)
    (zero / "1").mkdir(exist_ok=True)
    with open(zero / "config.pbtxt", "a") as f:
        f.write('parameters [\n{ key: "execute_delay_ms"; value: { string_value: "1000" }}\n]\n')
    # models/repeat_int32 (Triton's QA image) and test.sh's non-decoupled copy:
    # sed -i "/model_transaction_policy/,+2d"; sed -i "s/repeat_int32/repeat_int32_non_decoupled/"
    (models / "repeat_int32" / "1").mkdir(parents=True)
    (models / "repeat_int32" / "config.pbtxt").write_text(_standin(REPEAT_INT32))
    (models / "repeat_int32_non_decoupled" / "1").mkdir(parents=True)
    lines, out, skip = REPEAT_INT32.split("\n"), [], 0
    for line in lines:
        if skip:
            skip -= 1
        elif "model_transaction_policy" in line:
            skip = 2
        else:
            out.append(line.replace("repeat_int32", "repeat_int32_non_decoupled", 1))
    (models / "repeat_int32_non_decoupled" / "config.pbtxt").write_text(_standin("\n".join(out)))


def run(suite):
    p = suite.path
    _models(suite)
    args = [f"--model-repository={p('models')}", "--log-verbose=2"]

    def state_release(label):
        suite.skip(f"test.sh: as many StateRelease as StateNew lines in the server log [{label}]",
                   STATE_RELEASE_REASON)

    for test in PLAIN:
        with suite.block(test) as b:
            b.start(args, log=f"inference_server.{test}.log")
            b.unittest(TEST, f"{CLEANUP}.{test}")
        state_release(test)

    for test in ERROR_STATUS:
        with suite.block(test) as b:
            b.start(args + ["--grpc-restricted-protocol=inference:infer-key=infer-value"],
                    log=f"inference_server.{test}.log")
            b.unittest(TEST, f"{CLEANUP}.{test}")
        state_release(test)

    for test in SHUTDOWN:
        with suite.block(test) as b:
            server = b.start(args, log=f"inference_server.{test}.log")
            b.unittest(TEST, f"{CLEANUP}.{test}")

            def exits(server=server):
                deadline = time.monotonic() + EXIT_WAIT
                while server.running() and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert not server.running(), f"nereus still runs {EXIT_WAIT} s after the test's SIGINT"
            b.check("the server exits after the test's SIGINT (wait $SERVER_PID)", exits)
        state_release(test)

    test = "test_decoupled_infer_complete"
    log = f"inference_server.{test}.log"
    with suite.block(test) as b:
        b.start(args, log=log, extra_env={"TRITONSERVER_DELAY_GRPC_COMPLETE": "2000"})
        b.unittest(TEST, f"{CLEANUP}.{test}", env={"SERVER_LOG": log, "TRITONSERVER_DELAY_GRPC_COMPLETE": "2000"})
    state_release(test)
