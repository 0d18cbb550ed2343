"""qa/L0_sequence_corrid_batcher/test.sh: the sequence batcher's CONTROL_SEQUENCE_CORRID control —
four sequences of different lengths on a model that reads its correlation ID as an input tensor
(the shorter two end early, so the batch slots of the longer must be padded right and each sequence's
CORRID reach the model), and the check of a request's correlation ID against the control's
`data_type` (a string ID refused unless the control is TYPE_STRING, a numeric one unless it is an
integer type, with tritonserver's message naming both types).

Block by block as test.sh, in its order:
- one server run against `models4`: Triton's generated `qa_dyna_sequence_model_repository` models
  (`gen_qa_dyna_sequence_models.py --onnx`, generated here beside the harness's other repositories:
  harness/models.py has no entry for it) edited as test.sh edits them — the `oldest` strategy taken
  out (the direct strategy, test.sh's `sed -z`), `max_batch_size: 1`, four instances — with
  tritonserver's test hooks TRITONSERVER_DELAY_SCHEDULER=12 and TRITONSERVER_BACKLOG_DELAY_SCHEDULER=0
  given to the server and the test as test.sh exports them, and `test_skip_batch` (statistics: 12
  executions of batch size 1);
- five server runs against `corrid_data_type`, one per CORRID `data_type` of test.sh's loop
  (TYPE_STRING, TYPE_UINT32, TYPE_INT32, TYPE_UINT64, TYPE_INT64), each with `test_corrid_data_type`
  and TRITONSERVER_CORRID_DATA_TYPE set as test.sh sets it.

Substitutions: test_skip_batch runs the trials `plan` and `onnx` (hard-coded in the test, not read
from BACKENDS), so `plan_dyna_sequence_int32`, a TensorRT model, is Triton's generated ONNX
`onnx_dyna_sequence_int32` under that name (the same I/O, controls and configuration; the test
expects the same answers of both: INPUT + START + END * CORRID), as in docs/conformance.md;
`libtorch_dyna_sequence_int32`, which test.sh also copies, is left out: no test uses it. The
`add_sub` of test_corrid_data_type is a Python-backend model (`qa/python_models/add_sub`: OUTPUT0 =
INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, FP32 [16]); Nereus's bundled `add_sub` plugin, the same
model, stands in with the Python model's configuration (`backend: "add_sub"`), the CORRID control
appended as test.sh appends it. What the test checks is the server's check of the correlation ID
before the model runs, and the model's sum and difference when it passes.

test.sh's CUDA_VISIBLE_DEVICES=0 (so that TRITONSERVER_DELAY_SCHEDULER's requests are not spread
over several GPUs) does not matter here: the generated ONNX models have KIND_CPU instances.
"""
import re
import shutil
import subprocess

from harness.models import ONNX_OPSET

TEST = "sequence_corrid_batcher_test.py"
DYNA = "qa_dyna_sequence_model_repository"
CORRID_TYPES = ["TYPE_STRING", "TYPE_UINT32", "TYPE_INT32", "TYPE_UINT64", "TYPE_INT64"]


def dyna_models(env):
    """$DATADIR/qa_dyna_sequence_model_repository: Triton's gen_qa_dyna_sequence_models.py --onnx,
    once, into the harness's cache of generated repositories."""
    out = env.models.root / DYNA
    done = out.parent / f".{DYNA}.done"
    if done.exists():
        return out
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"  generating {DYNA} with qa/common/gen_qa_dyna_sequence_models.py --onnx", flush=True)
    log = out.parent / f".{DYNA}.log"
    with open(log, "wb") as f:
        p = subprocess.run([env.models.python, str(env.qa / "common" / "gen_qa_dyna_sequence_models.py"),
                            "--onnx", ONNX_OPSET, f"--models_dir={out}"], cwd=env.qa / "common", stdout=f,
                           stderr=subprocess.STDOUT, env={"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"})
    if p.returncode != 0:
        raise RuntimeError(f"qa/common/gen_qa_dyna_sequence_models.py failed; see {log}")
    done.touch()
    return out


def _models4(suite):
    suite.reset("models4")
    src = dyna_models(suite.env) / "onnx_dyna_sequence_int32"
    for name in ("plan_dyna_sequence_int32", "onnx_dyna_sequence_int32"):
        target = suite.path("models4", name)
        shutil.copytree(src, target)
        config = target / "config.pbtxt"
        text = config.read_text()
        text = re.sub(r'(?m)^name: ".*"$', f'name: "{name}"', text)
        # sed -i -z "s/oldest.*{.*}.*control_input/control_input/"
        text = re.sub(r"oldest.*{.*}.*control_input", "control_input", text, count=1, flags=re.S)
        text = re.sub(r"(?m)^max_batch_size:.*", "max_batch_size: 1", text)
        text = re.sub(r"kind: KIND_GPU", "kind: KIND_GPU\ncount: 4", text)
        text = re.sub(r"kind: KIND_CPU", "kind: KIND_CPU\ncount: 4", text)
        config.write_text(text)


def _add_sub(suite, corrid_type):
    """corrid_data_type/add_sub: the Python model's configuration with the bundled `add_sub` plugin
    as its backend, and test.sh's CORRID control appended."""
    d = suite.path("corrid_data_type", "add_sub")
    (d / "1").mkdir(parents=True, exist_ok=True)
    config = (suite.env.qa / "python_models" / "add_sub" / "config.pbtxt").read_text()
    config = config.replace('backend: "python"', 'backend: "add_sub"')
    config += (f'sequence_batching {{ control_input [{{ name: "CORRID" control [{{ '
               f'kind: CONTROL_SEQUENCE_CORRID data_type: {corrid_type} }}] }}] }}\n')
    (d / "config.pbtxt").write_text(config)


def run(suite):
    p = suite.path
    _models4(suite)
    env = {"NO_BATCHING": "0", "MODEL_INSTANCES": "4"}
    delays = {"TRITONSERVER_DELAY_SCHEDULER": "12", "TRITONSERVER_BACKLOG_DELAY_SCHEDULER": "0"}
    with suite.block("test_skip_batch, models4") as b:
        b.start([f"--model-repository={p('models4')}"], extra_env=delays)
        b.unittest(TEST, "SequenceCorrIDBatcherTest.test_skip_batch", env={**env, **delays})

    suite.reset("corrid_data_type")
    for corrid_type in CORRID_TYPES:
        _add_sub(suite, corrid_type)
        with suite.block(f"test_corrid_data_type, {corrid_type}") as b:
            b.start([f"--model-repository={p('corrid_data_type')}"])
            b.unittest(TEST, "SequenceCorrIDBatcherTest.test_corrid_data_type",
                       env={**env, "TRITONSERVER_CORRID_DATA_TYPE": corrid_type})
