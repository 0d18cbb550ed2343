"""qa/L0_request_cancellation/test.sh: cancelling inference requests — a gRPC call or stream the
client cancels while the model executes (the client sees "Locally cancelled by application!" or
asyncio's CancelledError, the server is told once), and requests cancelled while they wait in a
scheduler: queued in the dynamic batcher, backlogged or queued in the direct and oldest sequence
batchers (cancelling one request of a sequence cancels the whole sequence; counted in
`nv_inference_request_failure{reason="CANCELED"}`), a request in flight through an ensemble, and
every request of a gRPC stream stopped with `cancel_requests=True` — each answered CANCELLED.

Block by block as test.sh, in its order:
- nine server runs with `--log-verbose=2`, one per test of grpc_cancellation_test.py, against
  `custom_identity_int32` (test.sh's configuration: INT32 [-1], max_batch_size 1024, one CPU
  instance, `execute_delay_ms: 10000`), each with the environment test.sh gives it (tritonserver's
  testing hooks `TRITONSERVER_DELAY_GRPC_PROCESS`, `..._NOTIFICATION`, `..._ENQUEUE`,
  `..._PROCESS_ENTRY`, `TRITONSERVER_DELAY_RESPONSE_COMPLETION`, `..._COMPLETE_EXEC`, which delay
  steps of its gRPC frontend's C++ handler state machine; Nereus has no such steps and ignores the
  `TRITONSERVER_DELAY_GRPC_*` ones, while the two `..._RESPONSE_COMPLETE*` ones hold a ModelInfer
  answer back once its request is done, as there, and the tests read them back from their own
  environment); after each, test.sh's checks of
  the server log: tritonserver's "Cancellation notification received for " exactly once, and,
  but after the two plain async tests, its "StateRelease" once;
- one server run with the dynamic_batch, sequence_direct, sequence_oldest and ensemble_model of
  test.sh (execute_delay_ms 6000) and scheduler_test.py's six tests (test.sh runs the file once;
  here each test is its own process and case).

Substitution: test.sh's models are of Triton's C++ `identity` test backend (`backend: "identity"`);
Nereus's bundled `identity` plugin is that backend here, with the same configurations and
`execute_delay_ms`. A plugin's wait counts against `sandbox.execution_timeout_ms` (10 s by default),
so `custom_identity_int32`, whose execution takes 10 s, gets a limit of 60 s in its parameters.

Skipped: test.sh's C++ binaries — `request_cancellation_test` (a unit test against tritonserver's
in-process C API, libtritonserver.so) and the ten runs of `qa/clients/grpc_cancellation_test` (a
gtest client built from triton-inference-server/client in Triton's QA image) — and
implicit_state_test.py, whose `sequence_state` is a TorchScript model (`model.pt`, PyTorch backend)
with implicit state; Nereus has no PyTorch backend.
"""
from harness.core import grep_count, test_names

GRPC_TEST = "grpc_cancellation_test.py"
SCHED_TEST = "scheduler_test.py"
CANCEL_LOG_LINE = "Cancellation notification received for "
ROOMY = '{ key: "sandbox.execution_timeout_ms" \n value: { string_value: "60000" } }'

CUSTOM_IDENTITY = f"""name: "custom_identity_int32"
backend: "identity"
max_batch_size: 1024
input [{{ name: "INPUT0" 
 data_type: TYPE_INT32 
 dims: [ -1 ] }}]
output [{{ name: "OUTPUT0" 
 data_type: TYPE_INT32 
 dims: [ -1 ] }}]
instance_group [{{ kind: KIND_CPU }}]
parameters [{{ key: "execute_delay_ms" 
 value: {{ string_value: "10000" }} }}, {ROOMY}]
"""

# test.sh's TEST_CASE loop, with the environment each run gets.
GRPC_CASES = {
    "test_grpc_async_infer": {},
    "test_grpc_stream_infer": {},
    "test_aio_grpc_async_infer": {},
    "test_aio_grpc_stream_infer": {},
    "test_grpc_async_infer_cancellation_at_step_start": {"TRITONSERVER_DELAY_GRPC_PROCESS": "5000"},
    "test_grpc_async_infer_response_complete_during_cancellation": {
        "TRITONSERVER_DELAY_GRPC_NOTIFICATION": "5000", "TRITONSERVER_DELAY_GRPC_ENQUEUE": "5000"},
    "test_grpc_async_infer_cancellation_before_finish_0": {
        "TRITONSERVER_DELAY_GRPC_NOTIFICATION": "5000", "TRITONSERVER_DELAY_RESPONSE_COMPLETION": "5000"},
    "test_grpc_async_infer_cancellation_before_finish_1": {
        "TRITONSERVER_DELAY_GRPC_PROCESS_ENTRY": "1000", "TRITONSERVER_DELAY_RESPONSE_COMPLETION": "5000"},
    "test_grpc_async_infer_cancellation_before_response_complete_and_process_after_final_response": {
        "TRITONSERVER_DELAY_GRPC_NOTIFICATION": "5000", "TRITONSERVER_DELAY_RESPONSE_COMPLETE_EXEC": "5000"},
}

CPP_CASES = ("TestGrpcAsyncInferCancelExecutingRequest", "TestGrpcAsyncInferCancelQueuedRequest",
             "TestGrpcAsyncInferCancelAfterCompletionIsNoOp", "TestGrpcAsyncInferWithoutContextStillCompletes",
             "TestGrpcAsyncInferMultiCancelExecutingRequests", "TestGrpcAsyncInferMultiCancelQueuedRequest",
             "TestGrpcStreamInferCancelExecutingRequest", "TestGrpcStreamInferCancelQueuedRequest",
             "TestGrpcStreamCancelWithoutInfer", "TestGrpcStreamCancelThenRestart")


def _identity(name: str, extra: str, max_batch: int) -> str:
    return (f'name: "{name}"\nbackend: "identity"\nmax_batch_size: {max_batch}\n'
            'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
            'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
            'instance_group [{ count: 1 \n kind: KIND_CPU }]\n'
            f"{extra}"
            'parameters [{ key: "execute_delay_ms" \n value: { string_value: "6000" } }]\n')


SCHEDULER_MODELS = {
    "dynamic_batch": _identity("dynamic_batch", "dynamic_batching { max_queue_delay_microseconds: 600000 }\n", 2),
    "sequence_direct": _identity(
        "sequence_direct", "sequence_batching { direct { } \n max_sequence_idle_microseconds: 6000000 }\n", 1),
    "sequence_oldest": _identity(
        "sequence_oldest",
        "sequence_batching { oldest { max_candidate_sequences: 1 } \n max_sequence_idle_microseconds: 6000000 }\n", 1),
    "ensemble_model": """name: "ensemble_model"
platform: "ensemble"
max_batch_size: 1
input [{ name: "INPUT0" 
 data_type: TYPE_FP32 
 dims: [ -1 ] }]
output [{ name: "OUTPUT0" 
 data_type: TYPE_FP32 
 dims: [ -1 ] }]
ensemble_scheduling { step [
{ model_name: "dynamic_batch" 
 model_version: -1 
 input_map { key: "INPUT0" 
 value: "INPUT0" } 
 output_map { key: "OUTPUT0" 
 value: "out" } },
{ model_name: "dynamic_batch" 
 model_version: -1 
 input_map { key: "INPUT0" 
 value: "out" } 
 output_map { key: "OUTPUT0" 
 value: "OUTPUT0" } }
] }
""",
}


def _write_models(suite, models: dict[str, str]):
    suite.reset("models")
    for name, config in models.items():
        suite.path("models", name, "1").mkdir(parents=True)
        suite.path("models", name, "config.pbtxt").write_text(config)


def run(suite):
    p = suite.path
    repo = f"--model-repository={p('models')}"

    suite.skip("test.sh: request_cancellation_test (C++)",
               "a C++ unit test of test.sh built against tritonserver's in-process C API (libtritonserver.so)")

    # --- the Python gRPC client cancelling calls to a model that takes 10 s
    _write_models(suite, {"custom_identity_int32": CUSTOM_IDENTITY})
    for case, delays in GRPC_CASES.items():
        log = f"grpc_cancellation_test.{case}.server.log"
        with suite.block(case, quick=(case == "test_grpc_async_infer")) as b:
            b.start([repo, "--log-verbose=2"], log=log, extra_env=delays)
            b.unittest(GRPC_TEST, f"GrpcCancellationTest.{case}", env=delays)

            def cancelled_once(path=p(log)):
                n = grep_count(path, CANCEL_LOG_LINE, regex=False)
                assert n == 1, f"expected 1 line with {CANCEL_LOG_LINE!r} in the server log, found {n}"
            b.check("the server log says once that the cancellation was received", cancelled_once)
            if case not in ("test_grpc_async_infer", "test_aio_grpc_async_infer"):
                def released_once(path=p(log)):
                    n = grep_count(path, "StateRelease", regex=False)
                    assert n == 1, f"expected 1 'StateRelease' in the server log, found {n}"
                b.check("the server log says once that the state was released", released_once)

    for case in CPP_CASES:
        suite.skip(f"test.sh: grpc_cancellation_test (C++) GrpcCancellationTest.{case}",
                   "the C++ gtest client qa/clients/grpc_cancellation_test (built from "
                   "triton-inference-server/client in Triton's QA image)")

    # --- requests cancelled in the schedulers
    _write_models(suite, SCHEDULER_MODELS)
    with suite.block("scheduler") as b:
        b.start([repo, "--log-verbose=2"], log="scheduler_test.server.log")
        b.unittest(SCHED_TEST)

    suite.skip_tests("implicit_state_test.py", test_names(suite.qa_dir / "implicit_state_test.py"),
                     "its `sequence_state` is a TorchScript model with implicit state (model.pt, PyTorch "
                     "backend), which Nereus does not have")
