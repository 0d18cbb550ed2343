"""qa/L0_sequence_batcher/test.sh: the sequence batcher — sequences of one and many requests,
missing START, END or correlation ID, batch sizes, the backlog (filled, with repeated correlation
IDs, timing out), half, skipped, full and ragged batches, the direct strategy's queue delay and
minimum slot utilization, request timeouts — on models with 1, 2 and 4 instances, without
batching, and with variable-size tensors, one server per test as test.sh runs them.

As test.sh with BACKENDS="onnx custom" and IMPLICIT_STATE=0 (TensorRT, PyTorch and Python-backend
models need frameworks Nereus does not have) on a CPU-only machine: Triton's generated
`qa_sequence_model_repository`, `qa_variable_sequence_model_repository` and their ensembles
(`qa_ensemble_model_repository/…`), and the suite's `custom_sequence_int32`, whose C++ `sequence`
test backend Nereus's `sequence` plugin stands in for (plugins/sequence, served from a backend
directory as tritonserver serves libtriton_sequence.so, its version folder made as Triton's image
makes it), edited as test.sh edits them. Triton's generator gives the ONNX models KIND_GPU
instances and test.sh moves the ensembles' `nop_*` steps to KIND_GPU ("to avoid cuda init delay"):
on a machine without a GPU every instance group is KIND_CPU instead. The server and the test get tritonserver's test hooks
TRITONSERVER_DELAY_SCHEDULER and TRITONSERVER_BACKLOG_DELAY_SCHEDULER as test.sh sets them.
"""
import re
import shutil

from harness.core import install_standin_plugin, sed
from harness.gpu import has_gpu

TEST = "sequence_batcher_test.py"
FIXED = "qa_sequence_model_repository"
VARIABLE = "qa_variable_sequence_model_repository"
ENSEMBLE = "qa_ensemble_model_repository/"

NO_DELAY_TESTS = ["test_simple_sequence", "test_length1_sequence", "test_batch_size",
                  "test_no_sequence_start", "test_no_sequence_start2", "test_no_sequence_end",
                  "test_no_correlation_id"]
DELAY_TESTS = ["test_backlog_fill", "test_backlog_fill_no_end", "test_backlog_same_correlation_id",
               "test_backlog_same_correlation_id_no_end", "test_backlog_sequence_timeout",
               "test_half_batch", "test_skip_batch", "test_full_batch", "test_ragged_batch",
               "test_backlog"]
QUEUE_DELAY_TESTS = ["test_queue_delay_no_min_util", "test_queue_delay_half_min_util",
                     "test_queue_delay_full_min_util"]
TRIALS = ["0", "1", "2", "4", "v"]
# The trials the quick subset runs a test of (CI's time limit).
QUICK = {("1", "test_simple_sequence"), ("v", "test_length1_sequence"), ("0", "test_no_sequence_start")}


def _count(n):
    return [("kind: KIND_GPU", f"kind: KIND_GPU\ncount: {n}"), ("kind: KIND_CPU", f"kind: KIND_CPU\ncount: {n}")]


def _delays(test):
    """test.sh's TRITONSERVER_DELAY_SCHEDULER and TRITONSERVER_BACKLOG_DELAY_SCHEDULER for `test`."""
    backlog = {"test_backlog_fill_no_end": 3, "test_backlog_fill": 2, "test_backlog_same_correlation_id": 2}
    delay = {"test_backlog_fill_no_end": 10, "test_backlog_fill": 10,
             "test_backlog_same_correlation_id_no_end": 16, "test_half_batch": 8,
             "test_backlog_sequence_timeout": 4}
    return {"TRITONSERVER_DELAY_SCHEDULER": str(delay.get(test, 12)),
            "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": str(backlog.get(test, 0))}


def _models(suite):
    env = suite.env
    p = suite.path
    for d in ("models0", "models1", "models2", "models4", "modelsv", "queue_delay_models", "ragged_models",
              "backends"):
        suite.reset(d)
    custom = env.qa / "custom_models" / "custom_sequence_int32"

    def sources(repo, kind):
        """test.sh's MODELS: the ONNX sequence models of `kind` ('' or 'nobatch_') and their
        ensembles, and the custom model."""
        out = [env.models.model(repo, f"onnx_{kind}sequence_{dt}") for dt in ("int32", "bool")]
        ens = env.models.repository(ENSEMBLE + repo)
        out += sorted(m for m in ens.iterdir() if m.name.endswith(f"_onnx_{kind}sequence_int32"))
        return out + [custom]

    cpu = [] if has_gpu() else [("kind: KIND_GPU", "kind: KIND_CPU")]

    def copy(src, dest, edits):
        target = p(dest, src.name)
        shutil.copytree(src, target)
        (target / "1").mkdir(exist_ok=True)
        sed(target / "config.pbtxt", cpu + edits)
        return target

    for src in sources(FIXED, ""):
        copy(src, "models1", [(r"^max_batch_size:.*", "max_batch_size: 4")] + _count(1))
        copy(src, "models2", [(r"^max_batch_size:.*", "max_batch_size: 2")] + _count(2))
        copy(src, "models4", [(r"^max_batch_size:.*", "max_batch_size: 1")] + _count(4))
        q = copy(src, "queue_delay_models", [(r"^max_batch_size:.*", "max_batch_size: 4")] + _count(1) + [
            ("sequence_batching {", "sequence_batching {\ndirect {\nmax_queue_delay_microseconds: 3000000\n"
                                    "minimum_slot_utilization: 0\n}")])
        for suffix, util in (("_half", "0.5"), ("_full", "1")):
            d = p("queue_delay_models", src.name + suffix)
            shutil.copytree(q, d)
            sed(d / "config.pbtxt", [(re.escape(src.name), src.name + suffix),
                                      ("minimum_slot_utilization: 0", f"minimum_slot_utilization: {util}")])
    for src in sources(FIXED, "nobatch_"):
        copy(src, "models0", _count(4))
    for src in sources(VARIABLE, ""):
        copy(src, "modelsv", [(r"^max_batch_size:.*", "max_batch_size: 4")] + _count(1))
    for trial in TRIALS:
        for nop in env.models.repository(ENSEMBLE + FIXED).glob("nop_*"):
            shutil.copytree(nop, p(f"models{trial}", nop.name), dirs_exist_ok=True)
            p(f"models{trial}", nop.name, "1").mkdir(exist_ok=True)
            if has_gpu():
                sed(p(f"models{trial}", nop.name, "config.pbtxt"), [("kind: KIND_CPU", "kind: KIND_GPU")])
    for m in p("queue_delay_models").iterdir():
        if m.name.startswith(("simple_", "fan_", "sequence_")):
            shutil.rmtree(m)
    ragged = p("ragged_models", custom.name)
    shutil.copytree(custom, ragged)
    (ragged / "1").mkdir(exist_ok=True)
    sed(ragged / "config.pbtxt", [(r'name:.*"INPUT"', 'name: "INPUT"\nallow_ragged_batch: true')])
    timeout = p("request_timeout_models", "custom_sequence_int32_timeout", "1")
    timeout.mkdir(parents=True, exist_ok=True)
    # Triton's C++ test backends, stood in by Nereus plugins, in a backend directory.
    install_standin_plugin("sequence", p("backends"))


def run(suite):
    p = suite.path
    _models(suite)
    backends = f"--backend-directory={p('backends')}"
    base = {"BACKENDS": "onnx custom", "ENSEMBLES": "1", "IMPLICIT_STATE": "0", "INITIAL_STATE_FILE": "0",
            "INITIAL_STATE_ZERO": "0", "USE_SINGLE_BUFFER": "0"}

    def one(label, repo, test, env, delays=None, quick=False, case=None):
        with suite.block(label, quick=quick) as b:
            b.start([f"--model-repository={p(repo)}", backends, "--log-verbose=1"], extra_env=delays)
            b.unittest(TEST, case or f"SequenceBatcherTest.{test}", env={**env, **(delays or {})})

    for trial in TRIALS:
        env = {**base, "NO_BATCHING": "1" if trial == "0" else "0",
               "MODEL_INSTANCES": {"0": "4", "v": "1"}.get(trial, trial),
               "BATCHER_TYPE": "VARIABLE" if trial == "v" else "FIXED"}
        for test in NO_DELAY_TESTS:
            one(f"{test}, models{trial}", f"models{trial}", test, env, quick=(trial, test) in QUICK)
        for test in DELAY_TESTS:
            one(f"{test}, models{trial}", f"models{trial}", test, env, _delays(test), quick=(trial, test) in QUICK)
    fixed_one = {**base, "NO_BATCHING": "0", "MODEL_INSTANCES": "1", "BATCHER_TYPE": "FIXED"}
    one("test_ragged_batch_allowed, ragged_models", "ragged_models", "test_ragged_batch_allowed", fixed_one,
        {"TRITONSERVER_DELAY_SCHEDULER": "12", "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "0"})
    for test in QUEUE_DELAY_TESTS:
        one(f"{test}, queue_delay_models", "queue_delay_models", test, {**base, "NO_BATCHING": "0",
            "MODEL_INSTANCES": "1", "BATCHER_TYPE": "FIXED"},
            {"TRITONSERVER_DELAY_SCHEDULER": "2", "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "0"})
    with suite.block("request timeout") as b:
        b.start([f"--model-repository={p('request_timeout_models')}", backends, "--log-verbose=1"])
        b.unittest(TEST, "SequenceBatcherRequestTimeoutTest", env=fixed_one)
