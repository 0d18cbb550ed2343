"""qa/L0_custom_model_config/test.sh: `--model-config-name` — a model's configuration taken from
its `configs/<name>.pbtxt` when that file exists, from its `config.pbtxt` otherwise, and an empty
name refused at start-up.

Block by block as test.sh, in its order: Triton's generated ONNX model
onnx_nobatch_float32_float32_float32 with four configurations that differ in their version policy
(config.pbtxt [1,3], configs/h100.pbtxt [1], configs/v100.pbtxt [2], configs/config.pbtxt [3]);
each server run's GET /v2/models/<model>/config must answer 200 with exactly one
`"version_policy":{"specific":{"versions":[...]}}` of the expected versions, as test.sh's grep.
"""
import re

from harness.core import http

MODEL = "onnx_nobatch_float32_float32_float32"

VERSION_DEFAULT = "1,3"
VERSION_H100 = "1"
VERSION_V100 = "2"
VERSION_CUSTOM = "3"


def run(suite):
    env = suite.env
    p = suite.path

    suite.reset("models")
    d = env.models.copy("qa_model_repository", MODEL, p("models"))
    (d / "configs").mkdir()

    def policy(path, versions):
        """sed -i "s/^version_policy:.*/version_policy: { specific: { versions: [V] }}/" path"""
        text = path.read_text()
        text = re.sub(r"(?m)^version_policy:.*$",
                      f"version_policy: {{ specific: {{ versions: [{versions}] }}}}", text)
        path.write_text(text)

    policy(d / "config.pbtxt", VERSION_DEFAULT)
    for name, versions in (("h100", VERSION_H100), ("v100", VERSION_V100), ("config", VERSION_CUSTOM)):
        target = d / "configs" / f"{name}.pbtxt"
        target.write_text((d / "config.pbtxt").read_text())
        policy(target, versions)

    models = f"--model-repository={p('models')}"

    def custom_config(label, args, versions, quick=False):
        with suite.block(label, quick=quick) as b:
            b.start([models, *args])

            def check():
                code, body = http("GET", f"/v2/models/{MODEL}/config")
                assert code == 200, f"GET .../config answered {code}: {body}"
                want = f'"version_policy":{{"specific":{{"versions":[{versions}]}}}}'
                matches = body.count(want)
                assert matches == 1, f"expected 1 {want}, got {matches}: {body}"
            b.check(f"the configuration has version_policy specific versions [{versions}]", check)

    custom_config("default configuration", [], VERSION_DEFAULT, quick=True)
    custom_config("--model-config-name=h100", ["--model-config-name=h100"], VERSION_H100, quick=True)
    custom_config("--model-config-name=v100", ["--model-config-name=v100"], VERSION_V100)
    custom_config("--model-config-name=config", ["--model-config-name=config"], VERSION_CUSTOM)
    custom_config("--model-config-name=h200 (no such file: config.pbtxt instead)", ["--model-config-name=h200"],
                  VERSION_DEFAULT)

    with suite.block("--model-config-name= (empty)") as b:
        s = b.start([models, "--model-config-name="], expect_failure=True)
        b.check("the server does not start", lambda: _assert(s is None, "it started"))


def _assert(cond, msg):
    if not cond:
        raise AssertionError(msg)
