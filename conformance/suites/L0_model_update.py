"""qa/L0_model_update/test.sh: model instances added and removed by a reload without touching the
others, under each --rate-limit mode.

Every test drives `model_init_del`, a Python-backend model whose initialize and finalize write
counts to files in $MODEL_LOG_DIR that the test reads (qa/python_models/model_init_del/util.py),
and whose delays the test sets through those files. Nereus has no Python backend, and a sandboxed
Wasm plugin has no filesystem to write to, so no stand-in can run the test file unchanged: all its
cases are skipped, three times (one per rate-limit mode, as test.sh runs them).

What they check, beyond the Python backend: a reload that changes only `instance_group` creates
and destroys only the instances that differ, and `--rate-limit`/`--rate-limit-resource`. Nereus
rebuilds every instance of a reloaded version, and has no rate limiter (docs/compatibility.md).
"""
from harness.core import test_names

REASON = ("Python backend (model_init_del counts its instances' initialize/finalize in files the "
          "test reads)")


def run(suite):
    tests = test_names(suite.qa_dir / "instance_update_test.py")
    for mode in ("off", "execution_count", "execution_count_with_explicit_resource"):
        suite.skip_tests("instance_update_test.py", tests, REASON, f"--rate-limit {mode}")
    for mode in ("off", "execution_count", "execution_count_with_explicit_resource"):
        suite.skip(f"test.sh: no 'Should not print this' in the log [--rate-limit {mode}]", REASON)
