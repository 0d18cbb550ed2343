"""Triton's docs/examples models and Python client examples, as the twin suites L0_http and
L0_grpc use them: the `models/` folder Triton's QA image fills, the model-control example's
repository, and the skip reasons both recipes give for what this machine cannot run.

The ONNX example models are Triton's own files (tests/onnx_models/, unchanged); `simple_identity`
is a Python-backend model in Triton (BYTES back unchanged), for which Nereus's example of the same
name (model_repository/simple_identity, the `identity` Wasm plugin) stands in. The client examples
test.sh runs from `../clients/` (copied there from triton-inference-server/client in Triton's
image) are the same files in tests/python/triton_client_examples/ (unchanged)."""
import shutil
from pathlib import Path

from harness.core import grep_count

CLIENT_EXAMPLES = "tests/python/triton_client_examples"
IMAGE_SKIP = ("needs densenet_onnx, a download (Triton's docs/examples/fetch_models.sh) this "
              "machine does not have")
DYNA_SKIP = ("needs simple_string_dyna_sequence, Triton's C++ dyna_sequence test backend "
             "(libtriton_dyna_sequence.so), which Nereus has no stand-in for")
CXX_SKIP = "a C++ client binary (Triton's C++ client library is not built here)"
CUDA_SHM_SKIP = "CUDA shared memory: the example needs an NVIDIA GPU and the cuda-python package (tests/cuda_shm.rs, tests/python/test_cuda_shm.py and, with this example, tests/python/test_triton_client_examples.py run where they are)"
NGINX_SKIP = "needs nginx (a basic-auth proxy in front of the server), not installed here"
NGINX_TODO = "nginx is installed but the recipe does not run it yet"


def example(env, name: str) -> str:
    """The path of one of Triton's Python client examples."""
    return str(env.repo_root / CLIENT_EXAMPLES / name)


def example_models(suite, names, folder: str = "models") -> Path:
    """test.sh's `models/`: the ONNX example models `names` and `simple_identity`."""
    env = suite.env
    models = suite.path(folder)
    suite.reset(folder)
    for m in names:
        shutil.copytree(env.repo_root / "tests" / "onnx_models" / m, models / m)
    shutil.copytree(env.repo_root / "model_repository" / "simple_identity", models / "simple_identity")
    return models


# Models of test.sh's models/ this machine cannot serve as themselves (densenet_onnx, a download;
# simple_string_dyna_sequence, Triton's C++ dyna_sequence test backend), each with the model it is
# a renamed copy of.
PLACEHOLDERS = {"densenet_onnx": "simple", "simple_string_dyna_sequence": "simple_dyna_sequence"}


def add_placeholders(models: Path):
    """Placeholders under the PLACEHOLDERS' names, renamed copies that load: the clients that use
    those models are skipped, but the repository index must count test.sh's models (the model
    control examples and the asyncio tests check its length) and every model must load
    (tritonserver does not start when one fails)."""
    for name, like in PLACEHOLDERS.items():
        shutil.copytree(models / like, models / name)
        cfg = models / name / "config.pbtxt"
        cfg.write_text(cfg.read_text().replace(f'name: "{like}"', f'name: "{name}"'))


def refused_block(suite, label: str, args: list[str], message: str):
    """A server run test.sh expects to fail at start-up, logging `message` once."""
    with suite.block(label) as b:
        started = b.start(args, expect_failure=True)
        b.check("the server does not start", lambda: ensure(started is None, "it started"))
        b.check(f"the log says \"{message}\"",
                lambda: ensure(grep_count(b.log, message, False) == 1, "not logged once"))


def refused_restrictions(suite, repo: str, flag: str, noun: str):
    """test.sh's two starts with a bad `--{flag}` (--http-restricted-api, --grpc-restricted-protocol):
    one {noun} in two groups, and an unknown one, each refused in tritonserver's words."""
    refused_block(suite, f"restricted {noun} in two groups",
                  [repo, f"--{flag}=model-repository,health:k1=v1", f"--{flag}=metadata,health:k2=v2"],
                  f"{noun} 'health' can not be specified in multiple config groups")
    refused_block(suite, f"unknown restricted {noun}",
                  [repo, f"--{flag}=model-reposit,health:k1=v1", f"--{flag}=metadata,health:k2=v2"],
                  f"unknown restricted {noun} 'model-reposit'")


def ensure(cond, msg: str):
    """A recipe check's assertion (plain `assert` vanishes under python -O)."""
    if not cond:
        raise AssertionError(msg)
