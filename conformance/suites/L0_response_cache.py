"""qa/L0_response_cache/test.sh: the response cache (`--cache-config local,size=N`, a model's
`response_cache { enable: true }`): the flags that start a server and those it refuses, decoupled
models and ensembles refused with the cache, and ensembles caching their top-level response or a
composing model's (ensemble_cache_test.py, which reads the statistics' cache_hit and cache_miss).

Block by block as test.sh, in its order. Substitutions:
- Triton's C++ `identity` test backend (identity_cache, decoupled_cache) is Nereus's bundled
  `identity` plugin.
- The ensemble tests' models are Triton's generated QA models, as test.sh copies them.
Skipped: the C++ unit tests of tritonserver's cache library, the Redis cache (Nereus has the
`local` cache only) and the memory-growth run under valgrind's massif.
"""
import re

ENSEMBLE_TEST = "ensemble_cache_test.py"
ENSEMBLE = "simple_onnx_float32_float32_float32"
COMPOSING = "onnx_float32_float32_float32"
ENS = "qa_ensemble_model_repository/qa_model_repository"
REDIS = "not implemented: the Redis cache (Nereus has the 'local' cache only)"


def run(suite):
    env = suite.env
    p = suite.path

    suite.skip("test.sh: response_cache_test (C++ unit tests)",
               "tritonserver's C++ unit tests of its cache library (libtritoncache), not a server test")
    models = p("models")
    for m in ("decoupled_cache", "identity_cache"):
        (models / m / "1").mkdir(parents=True, exist_ok=True)
    for folder, ensemble_extra, composing_extra in (
        ("ensemble_models", "", ""),
        ("ensemble_cache_decoupled", "response_cache { enable: True }\nmodel_transaction_policy { decoupled: True }\n", ""),
        ("ensemble_cache_composing_decoupled", "response_cache { enable: True }\n",
         "model_transaction_policy { decoupled: True }\n"),
    ):
        suite.reset(f"models/{folder}")
        d = env.models.copy(ENS, ENSEMBLE, p("models", folder))
        with open(d / "config.pbtxt", "a") as f:
            f.write(ensemble_extra)
        c = env.models.copy("qa_model_repository", COMPOSING, p("models", folder))
        with open(c / "config.pbtxt", "a") as f:
            f.write(composing_extra)

    def refused_decoupled(label, repo, model):
        with suite.block(label) as b:
            s = b.start([f"--model-repository={repo}", "--cache-config", "local,size=10480",
                         "--model-control-mode=explicit", f"--load-model={model}"], expect_failure=True)

            def check():
                assert s is None, "the server started"
                log = b.log.read_text(errors="replace").lower()
                lines = [l for l in log.splitlines() if "response cache does not currently support" in l]
                assert any("decoupled" in l for l in lines), log[-2000:]
            b.check("the server refuses a decoupled model with the cache", check)

    def starts(label, args):
        with suite.block(label) as b:
            s = b.start([f"--model-repository={models}", *args, "--model-control-mode=explicit",
                         "--load-model=identity_cache"], expect_failure=True)
            b.check("the server starts", lambda: _assert(s is not None, b.log.read_text(errors="replace")[-2000:]))

    def refused(label, args, message):
        with suite.block(label, quick=True) as b:
            s = b.start([f"--model-repository={models}", *args, "--model-control-mode=explicit",
                         "--load-model=identity_cache"], expect_failure=True)

            def check():
                assert s is None, "the server started"
                log = b.log.read_text(errors="replace")
                assert re.search(message, log, re.IGNORECASE), log[-2000:]
            b.check(f"the server refuses to start, saying '{message}'", check)

    refused_decoupled("decoupled model", models, "decoupled_cache")
    starts("--response-cache-byte-size", ["--response-cache-byte-size=8192"])
    starts("--cache-config", ["--cache-config=local,size=8192"])
    refused("two caches", ["--cache-config=local,size=8192", "--cache-config=redis,key=value"],
            "multiple cache configurations")
    refused("both flags", ["--response-cache-byte-size=12345", "--cache-config=local,size=67890"],
            "incompatible flags")
    for case in ("redis cache config", "redis connection refused", "redis unknown host",
                 "redis without host and port", "redis password", "redis wrong password",
                 "redis without password", "redis password from the environment",
                 "redis user and password from the environment", "redis wrong password from the environment"):
        suite.skip(f"test.sh: {case}", REDIS)

    refused_decoupled("decoupled ensemble", p("models", "ensemble_cache_decoupled"), ENSEMBLE)
    refused_decoupled("ensemble with a decoupled step", p("models", "ensemble_cache_composing_decoupled"), ENSEMBLE)

    for test, size in (("test_ensemble_top_level_response_cache", 10840),
                       ("test_ensemble_all_models_cache_enabled", 10840),
                       ("test_ensemble_composing_model_cache_enabled", 10840),
                       ("test_ensemble_cache_insertion_failure", 200)):
        with suite.block(test, quick=test == "test_ensemble_top_level_response_cache") as b:
            b.start([f"--model-repository={p('models', 'ensemble_models')}", "--cache-config",
                     f"local,size={size}", "--model-control-mode=explicit"])
            b.unittest(ENSEMBLE_TEST, f"EnsembleCacheTest.{test}")
            if test == "test_ensemble_cache_insertion_failure":
                b.check("the log says 'Failed to insert key'",
                        lambda: _assert("failed to insert key" in b.server.log_text().lower(), "no such line"))

    suite.skip("test.sh: memory growth of identity_cache under perf_analyzer (valgrind massif)",
               "measures tritonserver's process under valgrind's massif; Nereus's cache is bounded by "
               "its size (tests/response_cache.rs)")


def _assert(cond, msg):
    if not cond:
        raise AssertionError(msg)
