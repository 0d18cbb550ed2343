"""qa/L0_dyna_sequence_batcher/test.sh: the sequence batcher's `oldest` strategy (dynamic batching of
sequences) on models that read their correlation ID through the CONTROL_SEQUENCE_CORRID control —
one sequence and a one-request sequence over HTTP and gRPC without batching, then, with
`max_candidate_sequences` 4 and a `max_queue_delay_microseconds` of 5 s so that a preferred batch
of 4 forms, four sequences in series and in parallel (batched 4, 4, 3: statistics checked), and
the backlog: a fifth sequence waiting for a free candidate slot, the backlog filled, with and
without an END, and a sequence timing out of it — one server per test, as test.sh runs them.

Block by block as test.sh with BACKENDS="onnx" and IMPLICIT_STATE=0, in its order: Triton's
generated `qa_dyna_sequence_model_repository` (`gen_qa_dyna_sequence_models.py --onnx`:
`onnx_dyna_sequence_int32`, `onnx_nobatch_dyna_sequence_int32`; generated once as
L0_sequence_corrid_batcher's recipe generates it, harness/models.py having no entry for it) with
test.sh's `count: 1`, then:
- NO_BATCHING=1: test_simple_sequence and test_length1_sequence (trials `onnx`, `onnx_nobatch`);
- test.sh's edit of every model (`max_candidate_sequences:4`,
  `max_queue_delay_microseconds:5000000`), then NO_BATCHING=0: test_multi_sequence,
  test_multi_parallel_sequence, test_backlog, test_backlog_fill, test_backlog_fill_no_end,
  test_backlog_sequence_timeout (trial `onnx`).

The test reads the backends it tries from BACKENDS, as test.sh exports it: `libtorch` and `plan`
need PyTorch and TensorRT, which Nereus does not have, and `custom` and `custom_string` are
`custom_dyna_sequence_int32` and its copy with a TYPE_STRING CORRID (a string correlation ID), both
of Triton's C++ `dyna_sequence` test backend (libtriton_dyna_sequence.so, server repository
src/test/dyna_sequence), which no Nereus plugin stands in for yet. So the trials here are the ONNX
models' only.

Skipped: test_multi_sequence_different_shape and test_multi_sequence_different_shape_allow_ragged
(the latter against test.sh's `ragged_models`), which run only the `custom` trial (the test's
_ragged_batch_supported_trials; `dyna_sequence` above): with BACKENDS="onnx" they would try nothing
and pass. test.sh's closing grep of its client log for "HTTPSocketPoolResponse status=200" (that the
tests ran at all, since unittest could swallow an ImportError) is not repeated: each test is a case
of its own here, failed when its process fails.
"""
import importlib.util
import re
import shutil
from pathlib import Path

TEST = "dyna_sequence_batcher_test.py"
NO_BATCHING_TESTS = ["test_simple_sequence", "test_length1_sequence"]
BATCHING_TESTS = ["test_multi_sequence", "test_multi_parallel_sequence", "test_backlog", "test_backlog_fill",
                  "test_backlog_fill_no_end", "test_backlog_sequence_timeout"]
CUSTOM_ONLY = "runs only the `custom` trial: custom_dyna_sequence_int32, a model of Triton's C++ " \
              "`dyna_sequence` test backend (libtriton_dyna_sequence.so), which no Nereus plugin " \
              "stands in for; with the test's BACKENDS=\"onnx\" it would try nothing"


def _dyna_models(env):
    """The generated qa_dyna_sequence_model_repository, as L0_sequence_corrid_batcher's recipe makes it."""
    path = Path(__file__).with_name("L0_sequence_corrid_batcher.py")
    spec = importlib.util.spec_from_file_location("suites.L0_sequence_corrid_batcher", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dyna_models(env)


def _edit(config: Path, edits):
    text = config.read_text()
    for pattern, repl in edits:
        text = re.sub(pattern, repl, text)
    config.write_text(text)


def run(suite):
    p = suite.path
    suite.reset("models")
    for model in sorted(_dyna_models(suite.env).iterdir()):
        if model.is_dir():
            shutil.copytree(model, p("models", model.name))
            # sed -i "s/kind: KIND_CPU/kind: KIND_CPU\ncount: 1/"
            _edit(p("models", model.name, "config.pbtxt"), [("kind: KIND_CPU", "kind: KIND_CPU\ncount: 1")])
    env = {"BACKENDS": "onnx", "IMPLICIT_STATE": "0"}
    args = [f"--model-repository={p('models')}"]

    for test in NO_BATCHING_TESTS:
        with suite.block(test) as b:
            b.start(args, log=f"{test}.server.log")
            b.unittest(TEST, f"DynaSequenceBatcherTest.{test}", env={**env, "NO_BATCHING": "1"})

    for model in p("models").iterdir():
        _edit(model / "config.pbtxt", [(r"max_candidate_sequences:.*", "max_candidate_sequences:4"),
                                       (r"max_queue_delay_microseconds:.*", "max_queue_delay_microseconds:5000000")])
    suite.skip(f"{TEST} DynaSequenceBatcherTest.test_multi_sequence_different_shape [test_multi_sequence_different_shape]",
               CUSTOM_ONLY)
    for test in BATCHING_TESTS:
        with suite.block(test) as b:
            b.start(args, log=f"{test}.server.log")
            b.unittest(TEST, f"DynaSequenceBatcherTest.{test}", env={**env, "NO_BATCHING": "0"})

    suite.skip(f"{TEST} DynaSequenceBatcherTest.test_multi_sequence_different_shape_allow_ragged "
               "[test_multi_sequence_different_shape_allow_ragged]", CUSTOM_ONLY)
