"""qa/L0_trace/test.sh: the trace extension's settings API (trace_endpoint_test.py) and
OpenTelemetry export (opentelemetry_unittest.py, against an OpenTelemetry Collector).

Models as test.sh makes them in trace_models/: `simple` and `global_simple` (Triton's generated
`onnx_int32_int32_int32`, version 1), `ensemble_add_sub_int32_int32_int32` (its ensemble over
`simple`), `dynamic_batch` and `custom_identity_int32` (Triton's C++ `identity` backend: Nereus's
bundled `identity` plugin stands in, with `execute_delay_ms`). Not here: `bls_simple`,
`input_all_required`, `trace_context`, `identity_fp32` (Python models). `repeat_int32`, L0_decoupled's
with "decoupled: False" (Triton's C++ repeat backend: the bundled `repeat_int32` plugin stands in). The OpenTelemetry tests start `./otelcol`, the
OpenTelemetry Collector that test.sh downloads from GitHub; the recipe links the one named by
$OTELCOL or found on PATH, and otherwise a stand-in (harness/otelcol.py: the collector's OTLP/HTTP
receiver, batch processor and file exporter, as trace-config.yaml configures them).
"""
import os
from pathlib import Path
import re
import shutil

ENS = "qa_ensemble_model_repository/qa_model_repository"
OTEL_TEST = "opentelemetry_unittest.py"
PYTHON = "Python backend (the test's model is a Python model: bls_simple, input_all_required or trace_context)"
SAGEMAKER = "SageMaker frontend (--allow-sagemaker): not in Nereus"


def run(suite):
    env = suite.env
    p = suite.path
    suite.reset("trace_models")
    tm = p("trace_models")
    _model(tm, "dynamic_batch",
        'backend: "identity"\nmax_batch_size: 1\n'
        'input [{ name: "INPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        'output [{ name: "OUTPUT0" \n data_type: TYPE_FP32 \n dims: [ -1 ] }]\n'
        'instance_group [{ count: 1 \n kind: KIND_CPU }]\n'
        'dynamic_batching {\n  preferred_batch_size: [ 1 ]\n'
        '  default_queue_policy { timeout_action: REJECT \n default_timeout_microseconds: 1000000 \n max_queue_size: 8 }\n}\n'
        'parameters [{ key: "execute_delay_ms" \n value: { string_value: "8000" } }]\n')
    simple = env.models.copy("qa_model_repository", "onnx_int32_int32_int32", tm / "simple")
    for v in ("2", "3"):
        shutil.rmtree(simple / v)
    _sub(simple / "config.pbtxt", r"(?m)^name:.*", 'name: "simple"')
    shutil.copytree(simple, tm / "global_simple")
    _sub(tm / "global_simple" / "config.pbtxt", r"(?m)^name:.*", 'name: "global_simple"')
    ens = env.models.copy(ENS, "simple_onnx_int32_int32_int32", tm / "ensemble_add_sub_int32_int32_int32")
    for v in ("2", "3"):
        shutil.rmtree(ens / v)
    _sub(ens / "config.pbtxt", r"(?m)^name:.*", 'name: "ensemble_add_sub_int32_int32_int32"')
    _sub(ens / "config.pbtxt", r"model_name:.*", 'model_name: "simple"')
    _model(tm, "custom_identity_int32",
        'name: "custom_identity_int32"\nbackend: "identity"\nmax_batch_size: 1024\n'
        'input [{ name: "INPUT0" \n data_type: TYPE_INT32 \n dims: [ -1 ] }]\n'
        'output [{ name: "OUTPUT0" \n data_type: TYPE_INT32 \n dims: [ -1 ] }]\n'
        'instance_group [{ kind: KIND_CPU }]\n'
        'parameters [{ key: "execute_delay_ms" \n value: { string_value: "500" } }, '
        '{ key: "enable_custom_tracing" \n value: { string_value: "true" } }]\n')
    # repeat_int32 from L0_decoupled with test.sh's sed "decoupled: True" -> "decoupled: False"
    # (Triton's C++ repeat backend; the bundled repeat_int32 plugin stands in).
    _model(tm, "repeat_int32",
        'name: "repeat_int32"\nbackend: "repeat_int32"\nmax_batch_size: 0\n'
        'model_transaction_policy { decoupled: False }\n'
        'input [{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }, '
        '{ name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] }, { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }]\n'
        'output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }]\n'
        'instance_group [{ kind: KIND_CPU }]\n')
    repo = f"--model-repository={tm}"

    suite.skip("test.sh: Triton-mode trace files (trace_summary.py checks of levels, rates, counts, "
               "per-model settings, BLS and custom activities)",
               "harness: test.sh's trace-file checks are not re-expressed yet (tests/tracing.rs checks Nereus's trace file)")

    with suite.block("trace settings API", quick=True) as b:
        b.start(["--trace-config", "triton,file=global_unittest.log", "--trace-config", "level=TIMESTAMPS",
                 "--trace-config", "rate=1", repo])
        b.unittest("trace_endpoint_test.py")

    otel_tests = [
        "test_http_trace_simple_model", "test_http_trace_simple_model_context_propagation",
        "test_grpc_trace_simple_model", "test_grpc_trace_all_input_required_model_cancel",
        "test_grpc_trace_model_cancel_in_queue", "test_non_decoupled",
        "test_grpc_trace_simple_model_context_propagation", "test_streaming_grpc_trace_simple_model",
        "test_streaming_grpc_trace_simple_model_context_propagation", "test_http_trace_bls_model",
        "test_http_trace_bls_model_context_propagation", "test_http_trace_ensemble_model",
        "test_http_trace_ensemble_model_context_propagation", "test_http_trace_triggered",
        "test_sagemaker_invocation_trace_simple_model_context_propagation",
        "test_sagemaker_invoke_trace_simple_model_context_propagation", "test_trace_context_exposed_to_pbe",
        "test_custom_backend_tracing", "test_custom_backend_tracing_context_propagation",
    ]
    python = {"test_grpc_trace_all_input_required_model_cancel", "test_http_trace_bls_model",
              "test_http_trace_bls_model_context_propagation", "test_trace_context_exposed_to_pbe"}
    sagemaker = {t for t in otel_tests if "sagemaker" in t}
    for t in otel_tests:
        reason = PYTHON if t in python else SAGEMAKER if t in sagemaker else None
        if reason:
            suite.skip(f"{OTEL_TEST} OpenTelemetryTest.{t}", reason)
    runnable = [t for t in otel_tests if t not in python | sagemaker]
    link = p("otelcol")
    if link.exists() or link.is_symlink():
        link.unlink()
    otelcol = os.environ.get("OTELCOL") or shutil.which("otelcol")
    if otelcol:
        link.symlink_to(otelcol)
    else:
        # The stand-in (harness/otelcol.py): the collector's OTLP/HTTP receiver, batch processor
        # and file exporter, as trace-config.yaml configures them.
        standin = Path(__file__).resolve().parent.parent / "harness" / "otelcol.py"
        link.write_text(f'#!/bin/sh\nexec "{suite.env.python}" "{standin}" "$@"\n')
        link.chmod(0o755)
    with suite.block("OpenTelemetry export") as b:
        b.start(["--model-control-mode=explicit", "--load-model=simple",
                 "--load-model=ensemble_add_sub_int32_int32_int32", "--load-model=repeat_int32",
                 "--load-model=custom_identity_int32", "--load-model=dynamic_batch", "--trace-config=level=TIMESTAMPS", "--trace-config=rate=1",
                 "--trace-config=count=-1", "--trace-config=mode=opentelemetry",
                 "--trace-config=opentelemetry,resource=test.key=test.value",
                 "--trace-config=opentelemetry,resource=service.name=test_triton",
                 "--trace-config=opentelemetry,url=localhost:10000/v1/traces", repo])
        b.unittest(OTEL_TEST, [f"OpenTelemetryTest.{t}" for t in runnable])


def _model(repo, name, config):
    """A model folder with version 1 (empty: the backend is a bundled plugin) and `config`."""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(config)


def _sub(path, pattern, repl):
    path.write_text(re.sub(pattern, repl, path.read_text()))
