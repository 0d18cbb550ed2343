"""qa/L0_lifecycle/test.sh: start-up with bad repositories and failing models, port collisions,
POLL and EXPLICIT model control, reloads, the repository index, config and file overrides,
shutdown with requests in flight, concurrent loads.

Block by block as test.sh, in its order. Substitutions:
- Triton's QA models of frameworks Nereus lacks (`libtorch_*`, `plan_*`, `openvino_*`) are the
  ONNX model of the same datatypes under their name (harness/models.py: standin): these tests
  exercise loading, versions, polling and readiness, not the framework. Tests whose point is the
  framework itself (a model's platform changing) are skipped.
- Triton's C++ `identity` test backend (identity_zero_1_int32, custom_zero_1_float32, with its
  `execute_delay_ms` and `creation_delay_sec` parameters) is Nereus's bundled `identity` plugin,
  which honours both parameters.
- test.sh's fixed `sleep $SLEEP_TIME` before a test becomes a wait for the condition it waits for
  (the server listening; every model READY or UNAVAILABLE, as util.sh's wait_for_model_stable).
"""
import json
import re
import shutil

from harness.core import grep_count, http, install_standin_plugin, wait_until

LC = "lifecycle_test.py"
ENS = "qa_ensemble_model_repository/qa_model_repository"
PYTHON = "Python backend (the test's models are Python models)"
TORCH_TRT = "the test is about a model's platform changing between TensorRT and PyTorch"
GPU = "needs an NVIDIA GPU (--model-load-gpu-limit, CUDA memory)"
ROOMY = 'parameters { key: "sandbox.execution_timeout_ms" value: { string_value: "60000" } }'


def run(suite):
    env = suite.env
    p = suite.path

    def fresh(*dirs):
        suite.reset(*dirs)
        for d in ("libtorch_float32_float32_float32", "simple_float32_float32_float32"):
            if p(d).exists():
                shutil.rmtree(p(d))
        for f in suite.dir.glob("config.pbtxt.*"):
            f.unlink()

    def qa(name, dest, repo="qa_model_repository"):
        return env.models.standin(name, p(dest), repo)

    def ens(name, dest):
        """An ensemble of Triton's generated QA ensembles. One over a PyTorch model maps its steps'
        tensors by PyTorch's names (OUTPUT__0); over the ONNX stand-in they are ONNX's (OUTPUT0)."""
        d = env.models.copy(ENS, name, p(dest))
        if "libtorch" in name:
            sed(d / "config.pbtxt", r'key: "(INPUT|OUTPUT)__(\d+)"', r'key: "\1\2"')
        return d

    def sed(path, pattern, repl):
        path = p(path) if isinstance(path, str) else path
        path.write_text(re.sub(pattern, repl, path.read_text()))

    def append(path, text):
        with open(p(path), "a") as f:
            f.write(text + "\n")

    def stable(b):
        """util.sh's wait_for_model_stable: every model READY or UNAVAILABLE."""
        if not b or b.broken:
            return

        def settled():
            _, body = http("POST", "/v2/repository/index")
            states = [m.get("state") for m in json.loads(body) if "state" in m]
            return all(s in ("READY", "UNAVAILABLE") for s in states)
        wait_until("every model READY or UNAVAILABLE", settled, timeout=120)

    models, models_0 = f"--model-repository={p('models')}", f"--model-repository={p('models_0')}"

    # --- start-up with a repository that does not exist ----------------------------------
    for label, args in (
        ("missing repository, strict readiness", ["--model-repository=/tmp/xyzx", "--strict-readiness=true", "--exit-on-error=false"]),
        ("missing repository", ["--model-repository=/tmp/xyzx", "--strict-readiness=false", "--exit-on-error=false"]),
        ("missing and empty repository, strict readiness", ["--model-repository=/tmp/xyzx", models, "--strict-readiness=true", "--exit-on-error=false"]),
        ("empty and missing repository", [models, "--model-repository=/tmp/xyzx", "--strict-readiness=false", "--exit-on-error=false"]),
    ):
        with suite.block(label, quick=label == "missing repository") as b:
            fresh("models")
            b.start(args, wait="listening", log=f"server_{len(suite.cases)}.log")
            b.unittest(LC, "LifeCycleTest.test_parse_error_noexit")

    # --- port collisions ---------------------------------------------------------------------
    for label, args, message in (
        ("GRPC port collision", ["--http-port", "8003", "--metrics-port", "8004"],
         "failed to start GRPC service: Unavailable - Socket '0.0.0.0:8001' already in use"),
        ("HTTP port collision", ["--grpc-port", "8003", "--metrics-port", "8004"],
         "failed to start HTTP service: Unavailable - Socket '0.0.0.0:8000' already in use"),
        ("metrics port collision", ["--grpc-port", "8003", "--http-port", "8004"],
         "failed to start Metrics service: Unavailable - Socket '0.0.0.0:8002' already in use"),
        ("multiple port collisions", [], None),
    ):
        with suite.block(label) as b:
            fresh("models")
            b.start([models], log="stub_server.log")
            second = b.start([models, *args], wait=None, log="collision_server.log", expect_failure=True)
            log = p("collision_server.log")
            if message:
                b.check(f"the log says {message!r}",
                        lambda: wait_until(message, lambda: grep_count(log, message, False) == 1, 20))
            else:
                pattern = r"failed to start.*service: Unavailable - Socket '.*' already in use"
                b.check("the log reports a port collision",
                        lambda: wait_until(pattern, lambda: grep_count(log, pattern) > 0, 20))
            if second is not None:
                b.stop(second)
    with suite.block("no port collision") as b:
        fresh("models")
        b.start([models])
        second = b.start([models, "--grpc-port", "8003", "--http-port", "8004", "--metrics-port", "8005"],
                         port=8004, log="second_server.log")
        b.check("a second server on other ports starts", lambda: _assert(second is not None, "it did not"))

    # --- failing models at start-up ------------------------------------------------------------
    def modelfail_repos():
        fresh("models", "models_0")
        for m in ("openvino", "libtorch"):
            qa(f"{m}_float32_float32_float32", "models")
        append("models/openvino_float32_float32_float32/config.pbtxt",
               'parameters { key: "ENABLE_BATCH_PADDING" value { string_value: "YES" } }')
        for m in ("onnx", "plan"):
            qa(f"{m}_float32_float32_float32", "models_0")
        for f in p("models/libtorch_float32_float32_float32/3").iterdir():
            f.unlink()

    with suite.block("a model version fails to load") as b:
        modelfail_repos()
        b.start([models, models_0, "--exit-on-error=false", "--exit-timeout-secs=5"], wait="live")
        stable(b)
        b.unittest(LC, "LifeCycleTest.test_parse_error_modelfail")
    with suite.block("a model version fails to load, no strict readiness") as b:
        b.start([models, models_0, "--exit-on-error=false", "--exit-timeout-secs=5", "--strict-readiness=false"], wait="live")
        stable(b)
        b.unittest(LC, "LifeCycleTest.test_parse_error_modelfail_nostrict")

    with suite.block("a model without config.pbtxt, strict model config") as b:
        fresh("models", "models_0")
        for m in ("openvino", "libtorch"):
            qa(f"{m}_float32_float32_float32", "models")
        for m in ("onnx", "plan"):
            qa(f"{m}_float32_float32_float32", "models_0")
        p("models/openvino_float32_float32_float32/config.pbtxt").unlink()
        b.start([models, models_0, "--exit-on-error=false", "--exit-timeout-secs=5", "--strict-model-config=true"], wait="live")
        stable(b)
        b.unittest(LC, "LifeCycleTest.test_parse_error_no_model_config")
        b.check("the log names the missing config.pbtxt",
                lambda: _assert(grep_count(b.log, "failed to open text file for read", False) > 0 and
                                grep_count(b.log, "openvino_float32_float32_float32/config.pbtxt: No such file or directory", False) > 0,
                                "'failed to open text file for read' / '.../config.pbtxt: No such file or directory' not logged"))

    with suite.block("models that fail to initialize") as b:
        fresh("models", "models_0")
        qa("onnx_sequence_int32", "models", "qa_sequence_model_repository")
        qa("onnx_int32_int32_int32", "models_0")
        sed("models/onnx_sequence_int32/config.pbtxt", "OUTPUT", "_OUTPUT")
        sed("models_0/onnx_int32_int32_int32/config.pbtxt", "OUTPUT", "_OUTPUT")
        for m in ("openvino", "libtorch"):
            qa(f"{m}_float32_float32_float32", "models")
        append("models/openvino_float32_float32_float32/config.pbtxt",
               'parameters { key: "ENABLE_BATCH_PADDING" value { string_value: "YES" } }')
        qa("onnx_float32_float32_float32", "models_0")
        b.start([models, models_0, "--exit-on-error=false", "--exit-timeout-secs=5"], wait="live")
        stable(b)
        b.unittest(LC, "LifeCycleTest.test_init_error_modelfail")

    with suite.block("a model without versions") as b:
        fresh("models")
        for m in ("libtorch", "onnx", "plan"):
            qa(f"{m}_float32_float32_float32", "models")
        p("models/openvino_float32_float32_float32").mkdir()
        shutil.copy(env.models.standin("openvino_float32_float32_float32", suite.dir / ".scratch_openvino") / "config.pbtxt",
                    p("models/openvino_float32_float32_float32/config.pbtxt"))
        shutil.rmtree(suite.dir / ".scratch_openvino")
        b.start([models, "--exit-on-error=false", "--exit-timeout-secs=5"], wait="live")
        stable(b)
        b.unittest(LC, "LifeCycleTest.test_parse_error_model_no_version")

    for label, folder, test, message in (
        ("a zero-prefixed version folder", "003", "test_parse_ignore_zero_prefixed_version",
         "ignore version directory '003' which contains leading zeros in its directory name"),
        ("a non-integral version folder", "abc", "test_parse_ignore_non_intergral_version",
         "ignore version directory 'abc' which fails to convert to integral number"),
    ):
        with suite.block(label, quick=folder == "abc") as b:
            fresh("models")
            qa("libtorch_float32_float32_float32", "models")
            p("models/libtorch_float32_float32_float32/3").rename(p(f"models/libtorch_float32_float32_float32/{folder}"))
            b.start([models, "--exit-on-error=false", "--exit-timeout-secs=5"])
            b.unittest(LC, f"LifeCycleTest.{test}")
            b.check(f"the log says {message!r}",
                    lambda: _assert(grep_count(b.log, message, False) > 0, "not logged"))

    # --- POLL and NONE ----------------------------------------------------------------------------
    with suite.block("models added and removed under POLL", quick=True) as b:
        fresh("models")
        for m in ("openvino", "onnx", "plan"):
            qa(f"{m}_float32_float32_float32", "models")
        qa("libtorch_float32_float32_float32", ".")
        b.start([models, "--repository-poll-secs=1", "--model-control-mode=poll", "--exit-timeout-secs=5"])
        b.unittest(LC, "LifeCycleTest.test_dynamic_model_load_unload")
    with suite.block("models added and removed under NONE") as b:
        fresh("models")
        for m in ("openvino", "onnx", "plan"):
            qa(f"{m}_float32_float32_float32", "models")
        qa("libtorch_float32_float32_float32", ".")
        b.start([models, "--model-control-mode=none", "--exit-timeout-secs=5"])
        b.unittest(LC, "LifeCycleTest.test_dynamic_model_load_unload_disabled")
    with suite.block("versions added and removed under POLL") as b:
        fresh("models")
        qa("libtorch_int32_int32_int32", "models")
        b.start([models, "--repository-poll-secs=1", "--model-control-mode=poll", "--exit-timeout-secs=5"])
        b.unittest(LC, "LifeCycleTest.test_dynamic_version_load_unload")
    with suite.block("versions added and removed under NONE") as b:
        fresh("models")
        qa("libtorch_int32_int32_int32", "models")
        b.start([models, "--model-control-mode=none", "--exit-timeout-secs=5"])
        b.unittest(LC, "LifeCycleTest.test_dynamic_version_load_unload_disabled")

    with suite.block("configurations changed under POLL") as b:
        fresh("models")
        for m in ("libtorch", "plan"):
            d = qa(f"{m}_float32_float32_float32", "models")
            text = (d / "config.pbtxt").read_text()
            p(f"config.pbtxt.{m}").write_text(re.sub(r"(?m)^version_policy.*\n", "", text))
            p(f"config.pbtxt.wrong.{m}").write_text(text.replace("output0_labels", "wrong_output0_labels"))
            (d / "wrong_output0_labels.txt").write_text((d / "output0_labels.txt").read_text().replace("label", "label9"))
        b.start([models, "--repository-poll-secs=1", "--model-control-mode=poll", "--exit-timeout-secs=5"])
        b.unittest(LC, "LifeCycleTest.test_dynamic_model_modify")

    with suite.block("model files deleted under POLL") as b:
        fresh("models")
        for m in ("onnx", "plan"):
            qa(f"{m}_float32_float32_float32", "models")
        b.start([models, "--repository-poll-secs=1", "--model-control-mode=poll", "--exit-timeout-secs=5", "--strict-model-config=false"])
        b.unittest(LC, "LifeCycleTest.test_dynamic_file_delete")

    def two_repos():
        fresh("models", "models_0")
        qa("openvino_float32_float32_float32", "models")
        append("models/openvino_float32_float32_float32/config.pbtxt",
               'parameters { key: "ENABLE_BATCH_PADDING" value { string_value: "YES" } }')
        qa("onnx_float32_float32_float32", "models_0")
        qa("libtorch_float32_float32_float32", ".")
        qa("libtorch_float32_float32_float32", "models")
        shutil.rmtree(p("models/libtorch_float32_float32_float32/3"))

    with suite.block("two repositories under POLL") as b:
        two_repos()
        b.start([models, models_0, "--model-control-mode=poll", "--repository-poll-secs=1", "--exit-timeout-secs=5"])
        b.unittest(LC, "LifeCycleTest.test_multiple_model_repository_polling")
    with suite.block("two repositories under EXPLICIT") as b:
        two_repos()
        b.start([models, models_0, "--model-control-mode=explicit", "--exit-timeout-secs=5"])
        b.unittest(LC, "LifeCycleTest.test_multiple_model_repository_control")

    # --- EXPLICIT ----------------------------------------------------------------------------------
    explicit = ["--model-control-mode=explicit", "--exit-timeout-secs=5", "--strict-model-config=false", "--strict-readiness=false"]

    def onnx_and_ensemble():
        fresh("models")
        qa("onnx_float32_float32_float32", "models")
        ens("simple_onnx_float32_float32_float32", "models")
        sed("models/onnx_float32_float32_float32/config.pbtxt", r"max_batch_size:.*", "max_batch_size: 1")
        sed("models/simple_onnx_float32_float32_float32/config.pbtxt", r"max_batch_size:.*", "max_batch_size: 1")

    with suite.block("load and unload", quick=True) as b:
        onnx_and_ensemble()
        b.start([models, *explicit])
        b.unittest(LC, "LifeCycleTest.test_model_control")
    with suite.block("a load that fails") as b:
        fresh("models")
        d = qa("onnx_float32_float32_float32", "models")
        for f in d.glob("*/*"):
            f.unlink()
        sed("models/onnx_float32_float32_float32/config.pbtxt", r"max_batch_size:.*", "max_batch_size: 1")
        b.start([models, *explicit])
        b.unittest(LC, "LifeCycleTest.test_model_control_fail")
    with suite.block("load and unload an ensemble") as b:
        onnx_and_ensemble()
        b.start([models, *explicit])
        b.unittest(LC, "LifeCycleTest.test_model_control_ensemble")

    def startup_repos():
        fresh("models", "models_0")
        for m in ("plan", "onnx"):
            qa(f"{m}_float32_float32_float32", "models")
            ens(f"simple_{m}_float32_float32_float32", "models_0")
            sed(f"models/{m}_float32_float32_float32/config.pbtxt", r"max_batch_size:.*", "max_batch_size: 1")
            sed(f"models_0/simple_{m}_float32_float32_float32/config.pbtxt", r"max_batch_size:.*", "max_batch_size: 1")
        qa("libtorch_float32_float32_float32", "models")
        qa("libtorch_float32_float32_float32", "models_0")

    startup = [models, models_0, "--model-control-mode=explicit", "--strict-readiness=false",
               "--strict-model-config=false", "--exit-on-error=false"]
    with suite.block("--load-model at start-up, two repositories") as b:
        startup_repos()
        b.start(startup + ["--load-model=libtorch_float32_float32_float32", "--load-model=plan_float32_float32_float32",
                           "--load-model=simple_onnx_float32_float32_float32"])
        b.unittest(LC, "LifeCycleTest.test_multiple_model_repository_control_startup_models")
    with suite.block("--load-model=* at start-up") as b:
        startup_repos()
        b.start(startup + ["--load-model=*"])
        b.unittest(LC, "LifeCycleTest.test_multiple_model_repository_control_startup_models")
    with suite.block("--load-model=* with another --load-model") as b:
        fresh("models")
        qa("onnx_float32_float32_float32", "models")
        started = b.start([models, models_0, "--model-control-mode=explicit", "--strict-readiness=true", "--exit-on-error=true",
                           "--load-model=*", "--load-model=onnx_float32_float32_float32"], expect_failure=True)
        b.check("the server does not start", lambda: _assert(started is None, "it started"))
    with suite.block("--load-model of a model that does not exist") as b:
        fresh("models")
        started = b.start([models, "--model-control-mode=explicit", "--strict-readiness=true", "--exit-on-error=true",
                           "--load-model=does-not-exist"], expect_failure=True)
        b.check("the server does not start", lambda: _assert(started is None, "it started"))
        b.check("the log says 'model not found in any model repository'",
                lambda: _assert(grep_count(b.log, "model not found in any model repository", False) > 0, "not logged"))

    with suite.block("the repository index") as b:
        fresh("models", "models_0")
        for m in ("plan", "libtorch"):
            qa(f"{m}_float32_float32_float32", "models")
            ens(f"simple_{m}_float32_float32_float32", "models_0")
        qa("onnx_float32_float32_float32", "models")
        qa("onnx_float32_float32_float32", "models_0")
        b.start(startup + ["--load-model=onnx_float32_float32_float32", "--load-model=plan_float32_float32_float32",
                           "--load-model=simple_libtorch_float32_float32_float32"])
        b.unittest(LC, "LifeCycleTest.test_model_repository_index")

    # --- availability during reloads (identity_zero_1_int32: creation_delay_sec 10) -------------
    def roomy(config):
        """The identity stand-in waits creation_delay_sec (10 s) inside its sandbox: more room
        than the sandbox's default 10 s deadline."""
        append(config, ROOMY)

    def identity_repo(versions=("1",)):
        fresh("models")
        shutil.copytree(p("identity_zero_1_int32"), p("models/identity_zero_1_int32"))
        for v in versions:
            p(f"models/identity_zero_1_int32/{v}").mkdir(exist_ok=True)
        roomy("models/identity_zero_1_int32/config.pbtxt")

    reload_args = [models, "--model-control-mode=explicit", "--exit-timeout-secs=5", "--strict-model-config=false",
                   "--load-model=identity_zero_1_int32", "--strict-readiness=false"]
    for protocol in ("grpc", "http"):
        grpc_env = {"TRITONSERVER_USE_GRPC": "1"} if protocol == "grpc" else {}
        with suite.block(f"availability on reload ({protocol})") as b:
            identity_repo()
            b.start(reload_args)
            b.unittest(LC, "LifeCycleTest.test_model_availability_on_reload", env=grpc_env)
        with suite.block(f"availability on reload 2 ({protocol})") as b:
            identity_repo(("1", "2"))
            append("models/identity_zero_1_int32/config.pbtxt", "version_policy: { specific { versions: [1] }}")
            p("config.pbtxt.v2").write_text(p("identity_zero_1_int32/config.pbtxt").read_text() +
                                            "version_policy: { specific { versions: [2] }}\n" + ROOMY + "\n")
            b.start(reload_args)
            b.unittest(LC, "LifeCycleTest.test_model_availability_on_reload_2", env=grpc_env)
        with suite.block(f"availability on reload 3 ({protocol})") as b:
            identity_repo(("1", "2"))
            append("models/identity_zero_1_int32/config.pbtxt", "version_policy: { specific { versions: [1] }}")
            shutil.copy(p("models/identity_zero_1_int32/config.pbtxt"), p("config.pbtxt.new"))
            b.start(reload_args)
            b.unittest(LC, "LifeCycleTest.test_model_availability_on_reload_3", env=grpc_env)

    with suite.block("a reload that fails") as b:
        # test.sh copies libtriton_identity.so into each version; the identity plugin is bundled.
        identity_repo(("1", "2"))
        append("models/identity_zero_1_int32/config.pbtxt", "version_policy: { specific { versions: [1] }}")
        p("config.pbtxt.v2.gpu").write_text((p("identity_zero_1_int32/config.pbtxt").read_text() +
                                             "version_policy: { specific { versions: [2] }}\n" + ROOMY + "\n").replace("KIND_CPU", "KIND_GPU"))
        b.start(reload_args)
        b.unittest(LC, "LifeCycleTest.test_model_reload_fail")
        msg = "failed to load 'identity_zero_1_int32' version 2: Internal: GPU instances not supported"
        b.check(f"the log says {msg!r}", lambda: _assert(grep_count(b.log, msg, False) > 0, "not logged"))

    for protocol in ("grpc", "http"):
        for order in ("normal", "reverse"):
            suite.skip(f"{LC} LifeCycleTest.test_load_same_model_different_platform [{protocol}, {order}]", TORCH_TRT)

    # --- the repository API in POLL mode, and unknown routes ----------------------------------------
    with suite.block("load and unload refused under POLL (--model-store)") as b:
        fresh("models")
        for m in ("openvino", "libtorch", "onnx", "plan"):
            qa(f"{m}_float32_float32_float32", "models")
        b.start([f"--model-store={p('models')}", "--repository-poll-secs=0", "--exit-timeout-secs=5",
                 "--strict-model-config=false", "--model-control-mode=poll"])
        name = "openvino_float32_float32_float32"
        b.check("unload answers an error", lambda: _assert(http("POST", f"/v2/repository/models/{name}/unload")[0] != 200, "200"))
        b.check("the model stays ready", lambda: _assert(http("GET", f"/v2/models/{name}/ready")[0] == 200, "not ready"))
        if b:
            for f in p(f"models/{name}").glob("*/*"):
                f.unlink()
        b.check("load answers an error", lambda: _assert(http("POST", f"/v2/repository/models/{name}/load")[0] != 200, "200"))
        b.check("the model is still ready", lambda: _assert(http("GET", f"/v2/models/{name}/ready")[0] == 200, "not ready"))

    with suite.block("unknown routes") as b:
        fresh("models")
        qa("openvino_int32_int32_int32", "models")
        b.start([models, "--model-control-mode=none", "--exit-timeout-secs=5"])
        for route in ("/notapi/v2", "/v2/notapi", "/v2/models/notapi/foo"):
            b.check(f"GET {route} answers 404", lambda route=route: _assert(http("GET", route)[0] == 404, str(http("GET", route))))

    # --- overrides -------------------------------------------------------------------------------
    with suite.block("config override") as b:
        fresh("models")
        d = qa("onnx_float32_float32_float32", "models")
        for v in ("1", "3"):
            for f in (d / v).iterdir():
                f.unlink()
        b.start([models, models, "--model-control-mode=explicit", "--strict-model-config=false"])
        b.unittest(LC, "LifeCycleTest.test_config_override")
    with suite.block("file override", quick=True) as b:
        fresh("models")
        d = qa("onnx_float32_float32_float32", "models")
        shutil.rmtree(d / "1")
        b.start([models, "--model-control-mode=explicit", "--load-model=onnx_float32_float32_float32", "--strict-model-config=false"])
        b.unittest(LC, ["LifeCycleTest.test_file_override", "LifeCycleTest.test_file_override_security"])

    # --- shutdown ----------------------------------------------------------------------------------
    def delayed_identity(dest):
        shutil.copytree(suite.env.qa / "custom_models" / "custom_zero_1_float32", p(dest))
        p(dest, "1").mkdir(exist_ok=True)
        append(f"{dest}/config.pbtxt", 'dynamic_batching {}\nparameters [\n'
               '{ key: "execute_delay_ms"; value: { string_value: "5000" }}\n]')

    with suite.block("shutdown with queued requests") as b:
        fresh("models")
        delayed_identity("models/custom_zero_1_float32")
        b.start([models, "--log-verbose=1", "--exit-timeout-secs=120"])
        b.unittest(LC, "LifeCycleTest.test_shutdown_dynamic")
        if b.server:
            b.server.proc.wait(timeout=120)
        msg = "Found 1 gRPC service connections and inference handlers"
        b.check(f"the log says {msg!r}", lambda: _assert(grep_count(b.log, msg, False) > 0, "not logged"))
    with suite.block("shutdown with sequences in flight") as b:
        fresh("models", "backends")
        shutil.copytree(suite.env.qa / "custom_models" / "custom_sequence_int32", p("models/custom_sequence_int32"))
        p("models/custom_sequence_int32/1").mkdir(exist_ok=True)
        install_standin_plugin("sequence", p("backends"))
        b.start([models, "--log-verbose=1", f"--backend-directory={p('backends')}"])
        b.unittest(LC, "LifeCycleTest.test_shutdown_sequence")
        if b.server:
            b.server.proc.wait(timeout=120)
        msg = "Model 'custom_sequence_int32' (version 1) has 2 in-flight inferences"
        b.check(f"the log says {msg!r}", lambda: _assert(grep_count(b.log, msg, False) > 0, "not logged"))
    with suite.block("shutdown with an ensemble in flight") as b:
        fresh("models")
        shutil.copytree(p("ensemble_zero_1_float32"), p("models/ensemble_zero_1_float32"))
        p("models/ensemble_zero_1_float32/1").mkdir(exist_ok=True)
        delayed_identity("models/custom_zero_1_float32")
        b.start([models, "--log-verbose=1"])
        b.unittest(LC, "LifeCycleTest.test_shutdown_ensemble")
        if b.server:
            b.server.proc.wait(timeout=120)
        msg = "Found 1 gRPC service connections and inference handlers"
        b.check(f"the log says {msg!r}", lambda: _assert(grep_count(b.log, msg, False) > 0, "not logged"))

    suite.skip("test.sh: --model-load-gpu-limit -1:0.6 is refused", GPU)
    suite.skip("test.sh: --model-load-gpu-limit 0:-0.4 is refused", GPU)
    suite.skip(f"{LC} LifeCycleTest.test_load_gpu_limit", GPU)

    # --- concurrent loads ------------------------------------------------------------------------------
    suite.skip(f"{LC} LifeCycleTest.test_concurrent_model_load_speedup", PYTHON)
    suite.skip(f"{LC} LifeCycleTest.test_concurrent_model_load", PYTHON)
    with suite.block("concurrent load and unload") as b:
        fresh("models")
        identity_repo()
        shutil.copytree(p("ensemble_zero_1_float32"), p("models/ensemble_zero_1_float32"))
        p("models/ensemble_zero_1_float32/1").mkdir(exist_ok=True)
        shutil.copytree(suite.env.qa / "custom_models" / "custom_zero_1_float32", p("models/custom_zero_1_float32"))
        p("models/custom_zero_1_float32/1").mkdir(exist_ok=True)
        append("models/custom_zero_1_float32/config.pbtxt",
               'parameters [\n{ key: "creation_delay_sec"; value: { string_value: "10" }}\n]')
        roomy("models/custom_zero_1_float32/config.pbtxt")
        b.start([models, "--model-control-mode=explicit"])
        b.unittest(LC, "LifeCycleTest.test_concurrent_model_load_unload")
    with suite.block("the same model loaded and unloaded concurrently") as b:
        fresh("models")
        identity_repo()
        sed("models/identity_zero_1_int32/config.pbtxt", r'string_value: "10"', 'string_value: "0"')
        b.start([models, "--model-control-mode=explicit", "--model-load-thread-count=32", "--log-verbose=2"])
        b.unittest(LC, "LifeCycleTest.test_concurrent_same_model_load_unload_stress")
    suite.skip(f"{LC} LifeCycleTest.test_concurrent_model_instance_load_speedup", PYTHON)
    suite.skip(f"{LC} LifeCycleTest.test_concurrent_model_instance_load_sanity", PYTHON)
    for what in ("test.sh: retry_model fails to load without --model-load-retry-count",
                 "test.sh: retry_model is ready with --model-load-retry-count=1",
                 f"{LC} LifeCycleTest.test_model_config_overwite",
                 f"{LC} LifeCycleTest.test_shutdown_while_background_unloading",
                 "test.sh: 2 models 'successfully unloaded'",
                 f"{LC} LifeCycleTest.test_shutdown_while_loading",
                 "test.sh: OnLoadFinal() before AsyncUnload()",
                 f"{LC} LifeCycleTest.test_shutdown_with_live_connection"):
        suite.skip(what, PYTHON)

    # --- --model-config-name --------------------------------------------------------------------------
    def custom_config_repo(in_place):
        fresh("models")
        d = qa("libtorch_float32_float32_float32", "models")
        (d / "configs").mkdir()
        text = re.sub(r"(?m)^version_policy:.*", "version_policy: { specific: { versions: [2] }}", (d / "config.pbtxt").read_text())
        (d / "configs" / "custom.pbtxt" if in_place else p("config.pbtxt.custom.libtorch")).write_text(text)

    custom_args = [models, "--repository-poll-secs=1", "--model-control-mode=poll", "--exit-timeout-secs=5", "--model-config-name=custom"]
    with suite.block("a custom config added under POLL") as b:
        custom_config_repo(False)
        b.start(custom_args)
        b.unittest(LC, "LifeCycleTest.test_add_custom_config")
    with suite.block("a custom config deleted under POLL") as b:
        custom_config_repo(True)
        b.start(custom_args)
        b.unittest(LC, "LifeCycleTest.test_delete_custom_config")
    suite.skip(f"{LC} LifeCycleTest.test_load_new_model_version", PYTHON)


def _assert(cond, msg):
    if not cond:
        raise AssertionError(msg)
