"""qa/L0_model_config/test.sh: model configurations, valid and not, each served alone.

Data-driven, as test.sh: each target folder is a model (or a repository) with `expected*` files.
For a target that must fail, the server must not become ready (test.sh: not ready within 20 s)
and one of the expected texts must be on an error line of its log (`grep ^E[0-9]{4}.*TEXT`, run
with grep itself, since the texts are grep patterns); for one that must load, the server must be
ready and the model's configuration, as both protocols show it, must equal one of the expected
configurations (Triton's compare_status.py, unchanged).

A server that has not become ready once every model is READY or UNAVAILABLE will not become
ready: the recipe stops waiting there rather than at test.sh's 20 s.

Stand-in: Triton's C++ `repeat` test backend (`libtriton_repeat.so`, which test.sh copies into the
decoupled-branching ensembles) is Nereus's bundled `repeat_int32` plugin, the same model (inputs IN,
DELAY, WAIT; outputs OUT, IDX; decoupled): the targets' `backend: "repeat"` is rewritten to it.

Skipped: targets for TensorRT, PyTorch, OpenVINO and Python models (their folders need those
frameworks' model files, or check what those backends' auto-complete fills in), the
noautofill_platform runs with platform `tensorrt_plan` and `pytorch_libtorch` (the same
configuration checks as with `onnxruntime_onnx`, which runs), model_metrics (Python models) and
custom_parameters (TensorRT models). On a machine without an NVIDIA GPU, the targets whose outcome
test.sh takes from a machine with one (GPU_TARGETS: an expected configuration with KIND_GPU on
GPU 0, or an instance group naming GPU 0 that must be accepted).
"""
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

from harness.core import FAIL, PASS, Server
from harness.gpu import has_gpu

SKIP_FRAMEWORK = {
    "tensorrt": "TensorRT (the target's model is a TensorRT plan, or it checks TensorRT's auto-complete)",
    "pytorch": "PyTorch (the target's model is a TorchScript model, or it checks PyTorch's auto-complete)",
    "openvino": "OpenVINO (the target's model is an OpenVINO model)",
    "python": "Python backend (the target's model is a Python model)",
}
SETTLE_TIMEOUT = 20.0

# Targets whose expected outcome assumes GPU 0 exists (tritonserver's CI machine has one).
GPU_TARGETS = {
    "noautofill_platform/negative_gpu": "its first instance group names GPU 0, which must be accepted",
    "autofill_noplatform_success/onnx/empty_config": "the expected configuration has KIND_GPU on GPU 0",
    "autofill_noplatform_success/onnx/no_config": "the expected configuration has KIND_GPU on GPU 0",
    "autofill_noplatform_success/custom/empty_config.identity": "the expected configuration has KIND_GPU on GPU 0",
    "autofill_noplatform_success/custom/no_backend.identity": "the expected configuration has KIND_GPU on GPU 0",
}


def run(suite):
    env = suite.env
    src = suite.dir

    def outcome(args, log):
        """Starts nereus; 'ready' if it becomes ready, else 'not ready' (it exited, or every model
        settled without it being ready, or 20 s passed). The server is stopped."""
        server = Server(env, src, args, src / log, None)
        deadline = time.monotonic() + SETTLE_TIMEOUT
        result = "not ready"
        try:
            while time.monotonic() < deadline and server.running():
                code = _get("/v2/health/ready")
                if code == 200:
                    result = "ready"
                    break
                if code is not None and _settled():
                    break
                time.sleep(0.1)
            return result, server
        finally:
            if result != "ready":
                server.stop()

    def expect_failure(case_id, target_path, args, pattern_prefix, expected_files):
        case_id = f"{case_id}"
        log = f"inference_server.{case_id.replace('/', '.').replace(' ', '_')}.log"
        result, server = outcome(args, log)
        if result == "ready":
            server.stop()
            suite.record(case_id, FAIL, "the server became ready; want it to fail with: " +
                         " / ".join(Path(e).read_text().strip() for e in expected_files))
            return
        for e in expected_files:
            text = Path(e).read_text().rstrip("\n")
            if subprocess.run(["grep", "-q", "--", f"{pattern_prefix}{text}", str(src / log)]).returncode == 0:
                suite.record(case_id, PASS)
                return
        errors = [line for line in (src / log).read_text(errors="replace").splitlines() if line[:1] == "E"]
        suite.record(case_id, FAIL, "no expected message in the log. Expected one of:\n  " +
                     "\n  ".join(Path(e).read_text().strip() for e in expected_files) +
                     "\nerror lines:\n  " + "\n  ".join(errors[-5:]))

    def models_from(target: Path, whole_repo: bool) -> Path:
        models = src / "models"
        if models.exists():
            shutil.rmtree(models)
        models.mkdir()
        if whole_repo:
            for entry in target.iterdir():
                dst = models / entry.name
                (shutil.copytree if entry.is_dir() else shutil.copy)(entry, dst)
        else:
            shutil.copytree(target, models / target.name)
        return models

    repo = f"--model-repository={src / 'models'}"
    gpu = has_gpu()

    def needs_gpu(target: str) -> str | None:
        """Why `target` is skipped on this machine, if it is."""
        why = GPU_TARGETS.get(target)
        return None if gpu or why is None else "needs an NVIDIA GPU: " + why

    # The stand-in for Triton's `repeat` test backend.
    for config in (src / "autofill_noplatform" / "ensemble").glob("*/*/config.pbtxt"):
        text = config.read_text()
        if 'backend: "repeat"' in text:
            config.write_text(text.replace('backend: "repeat"', 'backend: "repeat_int32"'))

    # test.sh's preparation that concerns the targets run here.
    for d in (src / "autofill_noplatform" / "ensemble").glob("*/*"):
        if d.is_dir() and (d / "config.pbtxt").exists():
            (d / "1").mkdir(exist_ok=True)
    for d in (src / "autofill_noplatform_success" / "ensemble").glob("*/*"):
        if d.is_dir() and (d / "config.pbtxt").exists():
            (d / "1").mkdir(exist_ok=True)
    for d in ("autofill_noplatform/custom/no_delimiter", "autofill_noplatform/custom/unknown_backend.unknown",
              "autofill_noplatform_success/custom/empty_config.identity",
              "autofill_noplatform_success/custom/no_backend.identity",
              "noautofill_platform/invalid_cpu", "noautofill_platform/invalid_gpu",
              "noautofill_platform/negative_gpu", "special_cases/invalid_platform",
              "special_cases/runtime_escape", "special_cases/invalid_runtime",
              "autofill_noplatform_success/onnx/cpu_instance"):
        (src / d / "1").mkdir(parents=True, exist_ok=True)
    (src / "special_cases/runtime_escape/dummy_runtime").mkdir(parents=True, exist_ok=True)
    (src / "special_cases/runtime_escape/dummy_runtime/libtriton_identity.so").touch()
    shutil.copy(env.models.model("qa_model_repository", "onnx_float32_float32_float32") / "1" / "model.onnx",
                src / "special_cases/invalid_platform/1/")
    shutil.copy(env.models.model("qa_identity_model_repository", "onnx_zero_1_float16") / "1" / "model.onnx",
                src / "autofill_noplatform_success/onnx/cpu_instance/1/")

    # test.sh expects these servers not to start: their model folders have no config.pbtxt, and
    # tritonserver's --exit-on-error defaults to true. Nereus's defaults to false (a deliberate
    # difference, docs/compatibility.md), so the recipe passes tritonserver's default.
    with suite.block("cli messages") as b:
        if b:
            for target in sorted((src / "cli_messages").iterdir()):
                extra = {"cli_override": ["--disable-auto-complete-config", "--strict-model-config=false"],
                         "cli_deprecation": ["--strict-model-config=true"]}.get(target.name, [])
                extra = [*extra, "--exit-on-error=true"]
                models_from(target, False)
                expect_failure(f"cli_messages/{target.name}", target, [repo, *extra], "",
                               sorted((src / "models" / target.name).glob("expected*")))

    with suite.block("special cases") as b:
        if b:
            for target in sorted((src / "special_cases").iterdir()):
                extra = ["--disable-auto-complete-config"] if target.name == "invalid_platform" else []
                models_from(target, False)
                expect_failure(f"special_cases/{target.name}", target, [repo, *extra],
                               "^E[0-9][0-9][0-9][0-9].*", sorted((src / "models" / target.name).glob("expected*")))

    with suite.block("no auto-complete, platform set", quick=True) as b:
        if b:
            targets = sorted((src / "noautofill_platform").iterdir())
            if env.quick:
                targets = targets[:6]
            for flag in ("--strict-model-config=true", "--disable-auto-complete-config"):
                for trial in ("tensorrt_plan", "pytorch_libtorch"):
                    for target in targets:
                        suite.skip(f"noautofill_platform/{target.name} [{trial}, {flag}]",
                                   "the same configuration check with platform " + trial +
                                   " (TensorRT / PyTorch); the onnxruntime_onnx run is the one made")
                for target in targets:
                    why = needs_gpu(f"noautofill_platform/{target.name}")
                    if why:
                        suite.skip(f"noautofill_platform/{target.name} [onnxruntime_onnx, {flag}]", why)
                        continue
                    models = models_from(target, False)
                    config = models / target.name / "config.pbtxt"
                    if config.exists():
                        lines = [l for l in config.read_text().splitlines() if "platform:" not in l]
                        config.write_text("\n".join(lines) + '\nplatform: "onnxruntime_onnx"\n')
                    expect_failure(f"noautofill_platform/{target.name} [onnxruntime_onnx, {flag}]", target,
                                   [repo, flag], "^E[0-9][0-9][0-9][0-9].*",
                                   sorted((models / target.name).glob("expected*")))

    with suite.block("auto-complete, must fail") as b:
        if b:
            for target in sorted((src / "autofill_noplatform").glob("*/*")):
                kind = target.parent.name
                case_id = f"autofill_noplatform/{kind}/{target.name}"
                if kind in SKIP_FRAMEWORK:
                    suite.skip(case_id, SKIP_FRAMEWORK[kind])
                    continue
                single = (target / "config.pbtxt").exists()
                models = models_from(target, not single)
                expected = sorted((models / target.name).glob("expected*") if single else models.glob("expected*"))
                expect_failure(case_id, target, [repo, "--strict-model-config=false"],
                               "^E[0-9][0-9][0-9][0-9].*", expected)

    with suite.block("auto-complete, must load") as b:
        if b:
            for target in sorted((src / "autofill_noplatform_success").glob("*/*")):
                kind = target.parent.name
                case_id = f"autofill_noplatform_success/{kind}/{target.name}"
                if kind in SKIP_FRAMEWORK:
                    suite.skip(case_id, SKIP_FRAMEWORK[kind])
                    continue
                if needs_gpu(case_id):
                    suite.skip(case_id, needs_gpu(case_id))
                    continue
                single = (target / "config.pbtxt").exists() or target.name.startswith("no_config")
                models_from(target, not single)
                log = f"inference_server.{case_id.replace('/', '.')}.log"
                result, server = outcome([repo, "--strict-model-config=false"], log)
                if result != "ready":
                    suite.record(case_id, FAIL, "the server did not become ready:\n" +
                                 "\n".join((src / log).read_text(errors="replace").splitlines()[-8:]))
                    continue
                p = b.run([env.python, "./compare_status.py", "--expected_dir", f"models/{target.name}",
                           "--model", target.name])
                server.stop()
                suite.record(case_id, PASS if p.returncode == 0 else FAIL, p.stdout[-3000:])

    for target in sorted((src / "model_metrics").glob("*/*")):
        suite.skip(f"model_metrics/{target.parent.name}/{target.name}",
                   "Python backend (the targets are Python models) and histogram metrics")
    for target in sorted((src / "custom_parameters").glob("*/*/*")):
        suite.skip(f"custom_parameters/{target.parent.parent.name}/{target.parent.name}/{target.name}",
                   SKIP_FRAMEWORK.get(target.parent.parent.name, "TensorRT"))


def _get(path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:8000{path}", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def _settled():
    try:
        req = urllib.request.Request("http://127.0.0.1:8000/v2/repository/index", data=b"{}", method="POST")
        with urllib.request.urlopen(req, timeout=2) as r:
            index = json.loads(r.read())
    except (OSError, ValueError):
        return False
    return all(m.get("state") in ("READY", "UNAVAILABLE") for m in index if "state" in m) and \
        any("state" in m for m in index)
