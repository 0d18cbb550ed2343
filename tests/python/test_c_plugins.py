"""The C plugins (plugins/c) through Triton's own clients, over HTTP and gRPC:

- `simple_c` (plugins/c/add_sub) answers exactly as the Rust `simple` does, outputs and errors, and
  so does add_sub_c on FP32 tensors of any length (`add_sub_fp32_c` against `add_sub_fp32`);
- `moving_average_c` (plugins/c/moving_average) matches a numpy computation of the trailing moving
  average (float64 in numpy, float32 out of the plugin: relative and absolute tolerance 1e-6), takes
  its window from the model configuration or the request, fails a bad request alone within a batch
  it otherwise answers, logs through the host, and refuses to load with a bad model parameter;
- nothing leaks: thousands of requests leave each C model's linear memory as it was;
- the sandbox holds for C: `faulty_c` and `faulty_deadline_c` (plugins/c/test_faults) trapping,
  looping forever and allocating without bound fail their request with the same message as the
  Rust test_faults plugin (`faulty`, `faulty_deadline`) gets for the same fault, the server keeps
  serving, and the trap's log names the C function that trapped; stdio reaches WASI through the
  adapter, and finds no file.

Usage: python test_c_plugins.py repo REPO RUST_TEST_FAULTS_WASM
           writes the fault models (faulty, faulty_deadline and their _c twins), add_sub_fp32_c
           (add_sub_fp32 served by add_sub_c) and a misconfigured moving_average_bad into REPO
           (which already holds simple, simple_c, add_sub_fp32 and moving_average_c), copying the
           Rust test_faults component; the C one is built by plugins/c/test_faults/build.sh into
           REPO/faulty_c/test_faults_c.wasm and REPO/faulty_deadline_c/test_faults_c.wasm
       python test_c_plugins.py check HTTP GRPC METRICS SERVER_LOG
           against nereus serving REPO with --test-hooks
"""
import concurrent.futures
import json
import os
import shutil
import sys
import time
import traceback
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

RNG = np.random.default_rng(26)
TOLERANCE = dict(rtol=1e-6, atol=1e-6)
# Fault models, Rust and C side by side, as tests/sandbox.rs sets up the Rust one: a 48 MiB memory
# cap (with the default 10 s deadline, far more than allocating 48 MiB takes on a loaded machine),
# and a 300 ms deadline.
FAULTS_CONFIG = """name: "{name}"
backend: "{backend}"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters [ {{ key: "{key}" value: {{ string_value: "{value}" }} }} ]
"""
FAULT_MODELS = {"faulty": ("sandbox.memory_limit_mb", "48"), "faulty_deadline": ("sandbox.execution_timeout_ms", "300")}


def write_repo(repo, rust_faults):
    for rust_name, (key, value) in FAULT_MODELS.items():
        for name, backend in ((rust_name, "test_faults"), (rust_name + "_c", "test_faults_c")):
            os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
            with open(os.path.join(repo, name, "config.pbtxt"), "w") as f:
                f.write(FAULTS_CONFIG.format(name=name, backend=backend, key=key, value=value))
        shutil.copy(rust_faults, os.path.join(repo, rust_name, "test_faults.wasm"))
    # add_sub_fp32 (the Rust add_sub on FP32 tensors of any length) served by add_sub_c
    os.makedirs(os.path.join(repo, "add_sub_fp32_c", "1"), exist_ok=True)
    with open(os.path.join(repo, "add_sub_fp32", "config.pbtxt")) as f:
        config = f.read().replace('backend: "add_sub"', 'backend: "add_sub_c"')
    with open(os.path.join(repo, "add_sub_fp32_c", "config.pbtxt"), "w") as f:
        f.write(config)
    shutil.copy(os.path.join(repo, "simple_c", "add_sub_c.wasm"), os.path.join(repo, "add_sub_fp32_c"))
    # moving_average_c with a window that is not a positive integer: its load must fail.
    bad = os.path.join(repo, "moving_average_bad")
    os.makedirs(os.path.join(bad, "1"), exist_ok=True)
    source = os.path.join(repo, "moving_average_c")
    with open(os.path.join(source, "config.pbtxt")) as f:
        config = f.read().replace('"moving_average_c"\nbackend', '"moving_average_bad"\nbackend')
    with open(os.path.join(bad, "config.pbtxt"), "w") as f:
        f.write(config.replace('string_value: "3"', 'string_value: "0"'))
    shutil.copy(os.path.join(source, "moving_average_c.wasm"), bad)


class Clients:
    def __init__(self, http_url, grpc_url):
        self.http_url = http_url
        self.http = httpclient.InferenceServerClient(url=http_url)
        self.grpc = grpcclient.InferenceServerClient(url=grpc_url)

    def both(self):
        return (("http", httpclient, self.http), ("grpc", grpcclient, self.grpc))

    def hook(self, path, body=None):
        """The server's test hooks (--test-hooks), over plain HTTP."""
        request = urllib.request.Request(
            f"http://{self.http_url}/nereus/test/models/{path}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"{}")


def infer(module, client, model, arrays, outputs=None, parameters=None, datatype=None):
    inputs = []
    for name, array in arrays.items():
        dt = datatype or ("INT32" if array.dtype == np.int32 else "FP32")
        tensor = module.InferInput(name, list(array.shape), dt)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    requested = None if outputs is None else [module.InferRequestedOutput(o) for o in outputs]
    return client.infer(model, inputs, outputs=requested, parameters=parameters)


def infer_error(*args, **kwargs):
    try:
        infer(*args, **kwargs)
    except InferenceServerException as e:
        return e
    raise AssertionError(f"expected an error from {args[2]}")


def same_error(rust, c, rust_name, c_name):
    """Two errors are the same once the model names are swapped (the message names the model)."""
    assert rust.status() == c.status(), (rust.status(), c.status())
    assert rust.message() == c.message().replace(c_name, rust_name), (rust.message(), c.message())


def test_simple_c_answers_as_simple(clients):
    extremes = np.array([[2**31 - 1, -(2**31), 0, -1] * 4], dtype=np.int32)
    for proto, module, client in clients.both():
        for batch in (1, 3, 8):
            a = RNG.integers(-(2**31), 2**31, size=(batch, 16), dtype=np.int64).astype(np.int32)
            b = RNG.integers(-(2**31), 2**31, size=(batch, 16), dtype=np.int64).astype(np.int32)
            a[0], b[0] = extremes[0], extremes[0][::-1]  # wrapping at both ends
            for outputs in (None, ["OUTPUT0"], ["OUTPUT1"], ["OUTPUT0", "OUTPUT1"]):
                rust = infer(module, client, "simple", {"INPUT0": a, "INPUT1": b}, outputs)
                c = infer(module, client, "simple_c", {"INPUT0": a, "INPUT1": b}, outputs)
                for name, expected in (("OUTPUT0", a + b), ("OUTPUT1", a - b)):
                    if outputs is None or name in outputs:
                        np.testing.assert_array_equal(c.as_numpy(name), expected, err_msg=f"{proto} {name}")
                        np.testing.assert_array_equal(c.as_numpy(name), rust.as_numpy(name))
                    else:
                        assert c.as_numpy(name) is None and rust.as_numpy(name) is None, (proto, name, outputs)
        # the same errors for the same bad requests: a wrong shape, a wrong datatype, a missing input
        a = np.zeros((1, 15), dtype=np.int32)
        for arrays, datatype in (({"INPUT0": a, "INPUT1": a}, None),
                                 ({"INPUT0": np.zeros((1, 16), np.float32), "INPUT1": np.zeros((1, 16), np.float32)}, "FP32"),
                                 ({"INPUT0": np.zeros((1, 16), np.int32)}, None)):
            rust = infer_error(module, client, "simple", arrays, datatype=datatype)
            c = infer_error(module, client, "simple_c", arrays, datatype=datatype)
            same_error(rust, c, "simple", "simple_c")
    # FP32 of any length, as add_sub_fp32 (IEEE single precision: the same bits), and the error
    # for inputs of different lengths
    for proto, module, client in clients.both():
        for n in (1, 7, 1000):
            a, b = (RNG.standard_normal(n) * 1e3).astype(np.float32), (RNG.standard_normal(n) * 1e3).astype(np.float32)
            rust = infer(module, client, "add_sub_fp32", {"INPUT0": a, "INPUT1": b})
            c = infer(module, client, "add_sub_fp32_c", {"INPUT0": a, "INPUT1": b})
            for name, expected in (("OUTPUT0", a + b), ("OUTPUT1", a - b)):
                np.testing.assert_array_equal(c.as_numpy(name), expected, err_msg=f"{proto} {name} {n}")
                np.testing.assert_array_equal(c.as_numpy(name), rust.as_numpy(name))
        arrays = {"INPUT0": np.ones(5, np.float32), "INPUT1": np.ones(6, np.float32)}
        rust = infer_error(module, client, "add_sub_fp32", arrays)
        c = infer_error(module, client, "add_sub_fp32_c", arrays)
        assert "INPUT0 and INPUT1 must have the same number of elements" in c.message(), c.message()
        same_error(rust, c, "add_sub_fp32", "add_sub_fp32_c")
    # the metadata is the Rust model's, name and backend aside
    rust, c = clients.http.get_model_config("simple"), clients.http.get_model_config("simple_c")
    for config in (rust, c):
        del config["name"], config["backend"], config["instance_group"][0]["name"]
    assert rust == c, (rust, c)


def moving_average(x, window):
    """The reference: trailing means over `window` along the last axis, in float64."""
    x = x.astype(np.float64)
    c = np.concatenate([np.zeros(x.shape[:-1] + (1,)), np.cumsum(x, axis=-1)], axis=-1)
    i = np.arange(1, x.shape[-1] + 1)
    lo = np.maximum(i - window, 0)
    return (c[..., i] - c[..., lo]) / (i - lo)


def response_parameter(proto, result, key):
    if proto == "http":
        return result.get_response()["parameters"][key]
    return result.get_response().parameters[key].int64_param


def test_moving_average_matches_numpy(clients):
    for proto, module, client in clients.both():
        for shape, window in (((1, 40), None), ((3, 7), 1), ((2, 50), 5), ((4, 6), 100), ((1, 1), 2), ((2, 0), 4)):
            x = (RNG.standard_normal(shape) * 100).astype(np.float32)
            parameters = None if window is None else {"window": window}
            r = infer(module, client, "moving_average_c", {"INPUT0": x}, parameters=parameters)
            used = 3 if window is None else window  # the model configuration's window, or the request's
            np.testing.assert_allclose(r.as_numpy("OUTPUT0"), moving_average(x, used), **TOLERANCE)
            assert r.as_numpy("OUTPUT0").dtype == np.float32
            assert response_parameter(proto, r, "window") == used, (proto, shape, window)


def test_moving_average_refuses_a_bad_window(clients):
    x = np.ones((1, 4), np.float32)
    for proto, module, client in clients.both():
        for window in (0, -2, "three", 2.5, True):
            e = infer_error(module, client, "moving_average_c", {"INPUT0": x}, parameters={"window": window})
            assert "the request parameter 'window' must be an integer >= 1" in e.message(), (proto, window, e)
            assert e.status() in ("400", "StatusCode.INVALID_ARGUMENT"), (proto, e.status())


def test_a_batch_answers_each_request_on_its_own(clients):
    """Four requests, the last three queued behind a closed gate so that they execute as one batch:
    each is answered with its own window, and the one with a bad window fails alone."""
    model = "moving_average_c"
    clients.hook(f"{model}/gate", {"open": False})
    xs = [(RNG.standard_normal((1, 12)) * 10).astype(np.float32) for _ in range(4)]
    windows = [2, 4, 0, 6]

    def send(k):
        client = httpclient.InferenceServerClient(url=clients.http_url)
        try:
            return infer(httpclient, client, model, {"INPUT0": xs[k]}, parameters={"window": windows[k]})
        except InferenceServerException as e:
            return e

    def wait_for(what, condition):
        deadline = time.monotonic() + 30
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.005)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        first = pool.submit(send, 0)
        wait_for("the first request at the gate", lambda: clients.hook(f"{model}/executions")["in_flight"] == 1)
        rest = [pool.submit(send, k) for k in (1, 2, 3)]
        wait_for("three requests queued", lambda: clients.hook(f"{model}/executions")["queued"] == 3)
        clients.hook(f"{model}/gate", {"open": True})
        results = [first.result(timeout=30)] + [f.result(timeout=30) for f in rest]
    for k, r in enumerate(results):
        if windows[k] == 0:
            assert isinstance(r, InferenceServerException) and r.status() == "400", r
            assert "'window' must be an integer >= 1" in r.message(), r
            continue
        assert not isinstance(r, InferenceServerException), (k, r)
        np.testing.assert_allclose(r.as_numpy("OUTPUT0"), moving_average(xs[k], windows[k]), **TOLERANCE)
        assert response_parameter("http", r, "batch_size") == (1 if k == 0 else 3), (k, r.get_response())


def test_model_parameter_and_log(clients, log_path):
    with open(log_path) as f:
        log = f.read()
    assert "moving_average_c: model 'moving_average_c' version 1, window 3" in log, log
    index = {m["name"]: m for m in clients.http.get_model_repository_index()}
    bad = index["moving_average_bad"]
    assert bad.get("state") == "UNAVAILABLE", bad
    assert "the model parameter 'window' must be a positive integer, got '0'" in bad.get("reason", ""), bad


def wasm_memory(metrics_url, model):
    """The model's nereus_wasm_memory_bytes gauge (the linear memory of its sandboxes)."""
    with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("nereus_wasm_memory_bytes{") and f'model="{model}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError(f"no nereus_wasm_memory_bytes for {model}:\n{text}")


def test_nothing_leaks(clients, metrics_url):
    """Memory ownership: thousands of requests more leave each C model's linear memory where it was
    (a leak of a few dozen bytes a request would grow it by pages; a page is 64 KiB)."""
    a = np.arange(8 * 16, dtype=np.int32).reshape(8, 16)
    cases = (("simple_c", {"INPUT0": a, "INPUT1": a}, None),
             ("moving_average_c", {"INPUT0": np.ones((4, 100), np.float32)}, {"window": 7}),
             ("faulty_c", {"INPUT0": np.arange(50, dtype=np.int32)}, None))
    for model, arrays, parameters in cases:
        def burst(n):
            for _ in range(n):
                infer(httpclient, clients.http, model, arrays, parameters=parameters)
            return wasm_memory(metrics_url, model)

        settled = burst(500)
        after = burst(3000)
        assert after <= settled, f"{model}: linear memory grew from {settled} to {after} bytes over 3000 requests"


def logged_backtrace(log_path, model, fault):
    """The last guest backtrace the server logged for `model` after `fault` (an ERROR line whose
    message, a JSON string, holds the fault and then one line per frame); "" when there is none."""
    with open(log_path) as f:
        lines = [l for l in f if l.startswith("E") and f"model '{model}'" in l and "guest backtrace" in l]
    traces = [json.loads(l.split("] ", 1)[1]) for l in lines]
    return next((t for t in reversed(traces) if fault in t.splitlines()[0]), "")


def test_the_sandbox_holds_for_c(clients, log_path):
    x = {"INPUT0": np.array([1, 2, 3], np.int32)}

    def healthy():
        for model in ("faulty_c", "faulty"):
            r = infer(httpclient, clients.http, model, x)
            np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), [1, 2, 3])
        r = infer(grpcclient, clients.grpc, "simple_c", {"INPUT0": np.ones((1, 16), np.int32), "INPUT1": np.ones((1, 16), np.int32)})
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), np.full((1, 16), 2))

    healthy()
    for model, fault, needle in (("faulty", "trap", "trapped: wasm trap: wasm `unreachable` instruction executed"),
                                 ("faulty_deadline", "loop", "exceeded its execution deadline of 300 ms"),
                                 ("faulty", "oom", "exceeded its memory limit of 48 MiB")):
        for proto, module, client in clients.both():
            rust = infer_error(module, client, model, x, parameters={"fault": fault})
            c = infer_error(module, client, model + "_c", x, parameters={"fault": fault})
            assert needle in c.message() and f"model '{model}_c'" in c.message(), (fault, proto, c.message())
            assert c.status() in ("500", "StatusCode.INTERNAL"), (fault, proto, c.status())
            same_error(rust, c, model, model + "_c")
            healthy()
    e = infer_error(httpclient, clients.http, "faulty_c", x, parameters={"fault": "error"})
    assert "failed to execute: test_faults_c: execution error requested" in e.message(), e.message()
    assert clients.http.is_model_ready("faulty_c")
    # stdio reaches WASI through the adapter, and the sandbox grants no file
    e = infer_error(httpclient, clients.http, "faulty_c", x, parameters={"fault": "read_file", "path": "/etc/hostname"})
    assert e.status() == "400" and "cannot read /etc/hostname: " in e.message(), (e.status(), e.message())
    healthy()

    # The faults' log: the guest backtraces name the C functions (the component keeps its name
    # section). The log is written as it comes: wait for the lines themselves.
    def backtrace(fault):
        deadline = time.monotonic() + 30
        while not logged_backtrace(log_path, "faulty_c", fault):
            assert time.monotonic() < deadline, f"no guest backtrace of '{fault}' in the log"
            time.sleep(0.01)
        return logged_backtrace(log_path, "faulty_c", fault).splitlines()

    frames = backtrace("trapped")
    assert " - trap_on_request+0x" in frames[1], frames  # innermost first
    assert " - exports_nereus_backend_lifecycle_execute+0x" in frames[2], frames
    frames = backtrace("exceeded its memory limit")
    assert any(" - allocate_without_bound+0x" in f for f in frames), frames


def main():
    if sys.argv[1] == "repo":
        write_repo(sys.argv[2], sys.argv[3])
        return
    clients = Clients(sys.argv[2], sys.argv[3])
    metrics_url, log_path = sys.argv[4], sys.argv[5]
    tests = [
        (test_simple_c_answers_as_simple, (clients,)),
        (test_moving_average_matches_numpy, (clients,)),
        (test_moving_average_refuses_a_bad_window, (clients,)),
        (test_a_batch_answers_each_request_on_its_own, (clients,)),
        (test_model_parameter_and_log, (clients, log_path)),
        (test_nothing_leaks, (clients, metrics_url)),
        (test_the_sandbox_holds_for_c, (clients, log_path)),
    ]
    failed = 0
    for test, args in tests:
        try:
            test(*args)
            print(f"ok: {test.__name__}")
        except Exception:
            failed += 1
            print(f"FAILED: {test.__name__}")
            traceback.print_exc()
    print(f"c plugins: {len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
