"""The models Triton's suites copy from /data/inferenceserver/<version>/..., made here by Triton's
own generators (qa/common/gen_qa_*.py) for ONNX, once per qa folder, into a cache.

Triton generates each QA model for every framework (TensorRT `plan_*`, `libtorch_*`, `openvino_*`,
`graphdef_*`, `savedmodel_*`, `onnx_*`) with the same inputs, outputs, datatypes, versions and
version policy: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, versions 2 and 3
swapped. Nereus has only ONNX Runtime among them. Where a suite copies a model of another framework
to exercise something that does not depend on the framework (loading, unloading, readiness,
repository polling), `standin()` copies the ONNX model of the same datatypes under the other
name: the same folder, versions and configuration, with `name` changed and `platform` still
`onnxruntime_onnx`. Triton's test helpers (qa/common/infer_util.py) read the platform from the
model's metadata and pick the output names from it, so they drive the stand-in unchanged. The
recipes say where they use one.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

# repository folder (as under /data/inferenceserver/<version>/) -> generator and its flags
# ONNX models are written with the opset the bundled ONNX Runtime (1.20) supports: the generator
# environment pins the onnx package (conformance/run.sh), as Triton's gen_qa_model_repository
# pins it to match its runtime, and --onnx_opset names the opset.
ONNX_OPSET = "--onnx_opset=21"
GENERATORS = {
    "qa_model_repository": ("gen_qa_models.py", ["--onnx", ONNX_OPSET]),
    "qa_sequence_model_repository": ("gen_qa_sequence_models.py", ["--onnx", ONNX_OPSET]),
    "qa_identity_model_repository": ("gen_qa_identity_models.py", ["--onnx", ONNX_OPSET]),
    "qa_ragged_model_repository": ("gen_qa_ragged_models.py", ["--onnx", ONNX_OPSET]),
    "qa_scalar_models": ("gen_qa_ort_scalar_models.py", [ONNX_OPSET]),
    "qa_ensemble_model_repository/qa_model_repository": ("gen_qa_models.py", ["--ensemble"]),
    "qa_ensemble_model_repository/qa_identity_model_repository": ("gen_qa_identity_models.py", ["--ensemble"]),
    "qa_variable_sequence_model_repository": ("gen_qa_sequence_models.py", ["--onnx", "--variable", ONNX_OPSET]),
    "qa_ensemble_model_repository/qa_sequence_model_repository": ("gen_qa_sequence_models.py", ["--ensemble"]),
    "qa_ensemble_model_repository/qa_variable_sequence_model_repository":
        ("gen_qa_sequence_models.py", ["--ensemble", "--variable"]),
    "qa_reshape_model_repository": ("gen_qa_reshape_models.py", ["--onnx", "--variable", ONNX_OPSET]),
    "qa_ensemble_model_repository/qa_reshape_model_repository": ("gen_qa_reshape_models.py", ["--ensemble"]),
    "qa_variable_model_repository": ("gen_qa_models.py", ["--onnx", "--variable", ONNX_OPSET]),
    "qa_ensemble_model_repository/qa_variable_model_repository": ("gen_qa_models.py", ["--ensemble", "--variable"]),
}

# Framework prefixes of Triton's QA model names that a stand-in may replace.
OTHER_FRAMEWORKS = ("libtorch", "plan", "openvino", "graphdef", "savedmodel", "netdef")


class Models:
    def __init__(self, qa: Path, python: str, cache: Path):
        self.qa = qa
        self.python = python
        digest = hashlib.sha256()
        digest.update(repr(GENERATORS).encode())
        for f in sorted((qa / "common").glob("gen_*.py")):
            digest.update(f.name.encode())
            digest.update(f.read_bytes())
        self.root = cache / digest.hexdigest()[:16]

    def repository(self, name: str) -> Path:
        """The generated repository `name` (a key of GENERATORS), made on first use."""
        out = self.root / name
        done = out.parent / f".{out.name}.done"
        if done.exists():
            return out
        script, flags = GENERATORS[name]
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        log = out.parent / f".{out.name}.log"
        print(f"  generating {name} with qa/common/{script} {' '.join(flags)}", flush=True)
        with open(log, "wb") as f:
            p = subprocess.run([self.python, str(self.qa / "common" / script), *flags,
                                f"--models_dir={out}"], cwd=self.qa / "common", stdout=f,
                               stderr=subprocess.STDOUT, env={"PYTHONDONTWRITEBYTECODE": "1",
                                                              "PATH": "/usr/bin:/bin"})
        if p.returncode != 0:
            raise RuntimeError(f"qa/common/{script} failed; see {log}")
        done.touch()
        return out

    def model(self, repo: str, name: str) -> Path:
        path = self.repository(repo) / name
        if not path.is_dir():
            raise FileNotFoundError(f"{name} is not among the generated {repo}")
        return path

    def copy_all(self, repos, dest: Path):
        """`cp -r $DATADIR/<repo>/* dest` for each generated repository of `repos`."""
        for repo in repos:
            for model in self.repository(repo).iterdir():
                if model.is_dir():
                    shutil.copytree(model, dest / model.name, dirs_exist_ok=True)

    def copy(self, repo: str, name: str, dest: Path) -> Path:
        """`cp -r $DATADIR/<repo>/<name> dest` (dest a folder to copy into, or the new path)."""
        src = self.model(repo, name)
        target = dest / name if dest.is_dir() else dest
        shutil.copytree(src, target)
        return target

    def standin(self, name: str, dest: Path, repo: str = "qa_model_repository") -> Path:
        """Copies the ONNX model standing in for Triton's QA model `name` (say
        `libtorch_float32_float32_float32`) to `dest` (a folder to copy into, or the new path),
        renamed. ONNX models themselves are copied as they are."""
        framework, _, rest = name.partition("_")
        onnx_name = name if framework == "onnx" else f"onnx_{rest}"
        if framework != "onnx" and framework not in OTHER_FRAMEWORKS:
            raise ValueError(f"no stand-in for {name}")
        src = self.model(repo, onnx_name)
        target = dest / name if dest.is_dir() else dest
        shutil.copytree(src, target)
        config = target / "config.pbtxt"
        text = config.read_text()
        text = re.sub(r'(?m)^name: ".*"$', f'name: "{name}"', text)
        config.write_text(text)
        return target
