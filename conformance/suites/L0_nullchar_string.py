"""qa/L0_nullchar_string/test.sh: a BYTES element with a null character in the middle
(`"abc\\0def"`) goes through an identity model and back unchanged, over HTTP and over gRPC, to two
models: a Python-backend one and a PyTorch one.

One server run, as test.sh, with `nullchar_string_client.py -m MODEL -v` (HTTP) and
`nullchar_string_client.py -m MODEL -i grpc -u localhost:8001 -v` for each of its two models; each
run is a case (test.sh's one RET, split per run).

Substitutions (the test checks how the server carries a null byte inside a BYTES element through
both protocols, not the backends):
- `python_string` is `qa/python_models/string` (a Python-backend model handing INPUT0 back as
  OUTPUT0, BYTES [1], alternating numpy `bytes_` and `object` on the way out) renamed as test.sh
  renames it; Nereus's bundled `identity` plugin stands in under that name, with the model's own
  configuration (`backend: "identity"` in place of `backend: "python"`, no model.py).
- `libtorch_nobatch_zero_1_object` (Triton's generated TorchScript identity model of
  qa_identity_model_repository: INPUT__0 to OUTPUT__0, BYTES [-1], no batching) is the `identity`
  plugin too (it answers INPUT__0 as OUTPUT__0), with the configuration of the generated
  `onnx_nobatch_zero_1_object` under that name and with the libtorch tensor names the client uses
  for a model whose name has "libtorch" in it.
"""
import shutil

CLIENT = "nullchar_string_client.py"
MODELS = ("python_string", "libtorch_nobatch_zero_1_object")


def run(suite):
    env = suite.env
    p = suite.path
    suite.reset("models")
    models = p("models")

    # mkdir -p models/python_string/1; cp ../python_models/string/config.pbtxt; sed name
    target = models / "python_string"
    (target / "1").mkdir(parents=True)
    src = suite.qa_dir.parent / "python_models" / "string" / "config.pbtxt"
    (target / "config.pbtxt").write_text(
        src.read_text().replace('name: "string"', 'name: "python_string"')
        .replace('backend: "python"', 'backend: "identity"'))

    # cp -r $DATADIR/libtorch_nobatch_zero_1_object models/.
    target = models / "libtorch_nobatch_zero_1_object"
    onnx = env.models.model("qa_identity_model_repository", "onnx_nobatch_zero_1_object")
    shutil.copytree(onnx, target)
    for f in (target / "1").iterdir():
        f.unlink()
    config = target / "config.pbtxt"
    config.write_text(config.read_text()
                      .replace('name: "onnx_nobatch_zero_1_object"', 'name: "libtorch_nobatch_zero_1_object"')
                      .replace('platform: "onnxruntime_onnx"', 'backend: "identity"')
                      .replace('"INPUT0"', '"INPUT__0"').replace('"OUTPUT0"', '"OUTPUT__0"'))

    with suite.block("nullchar", quick=True) as b:
        b.start([f"--model-repository={models}"])
        for model in MODELS:
            b.command(f"{CLIENT} -m {model} (HTTP)", [env.python, CLIENT, "-m", model, "-v"])
            b.command(f"{CLIENT} -m {model} (gRPC)",
                      [env.python, CLIENT, "-m", model, "-i", "grpc", "-u", "localhost:8001", "-v"])
