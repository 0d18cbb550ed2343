"""KIND_GPU vs KIND_CPU for the ONNX Runtime backend, on a machine with an NVIDIA GPU.

Builds an MLP and a small image CNN with the `onnx` package, serves each twice from one nereus —
`<name>_cpu` (KIND_CPU) and `<name>_gpu` (KIND_GPU, two instances, each on its own CUDA stream) —
checks the GPU's answers against onnxruntime run directly in Python (CPU), then measures
throughput and latency of both over HTTP (binary tensor extension) at several concurrencies, with
the server's own per-request compute times from its statistics. Prints a markdown report.

Needs only numpy, onnx and onnxruntime (the Python packages), so it runs where tritonclient is not
installed. Not a test: timings belong here, the pass/fail checks are in tests/onnx.rs.

Usage: python3 bench/onnx_gpu.py NEREUS_BINARY ORT_LIBRARY [SECONDS_PER_POINT] [KINDS]
  KINDS: comma-separated, default "cpu,gpu" ("cpu" alone tries the script on a machine without a GPU)
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(11)


def weight(name, *shape):
    scale = 1.0 / np.sqrt(np.prod(shape[1:]) if len(shape) > 1 else 1.0)
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def mlp():
    nodes = [
        helper.make_node("MatMul", ["X", "W1"], ["h1"]),
        helper.make_node("Add", ["h1", "B1"], ["h2"]),
        helper.make_node("Relu", ["h2"], ["h3"]),
        helper.make_node("MatMul", ["h3", "W2"], ["h4"]),
        helper.make_node("Add", ["h4", "B2"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 512])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 10])],
        [weight("W1", 512, 1024), weight("B1", 1024), weight("W2", 1024, 10), weight("B2", 10)],
    )
    return graph, (512,)


def cnn():
    """3×64×64 images: three 3×3 convolutions (the middle one strided), pooling, a classifier."""
    nodes = [
        helper.make_node("Conv", ["X", "K1", "B1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "K2", "B2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "K3", "B3"], ["c3"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("GlobalAveragePool", ["r3"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "G", "GB"], ["Y"]),
    ]
    graph = helper.make_graph(
        nodes, "cnn",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 3, 64, 64])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 10])],
        [weight("K1", 32, 3, 3, 3), weight("B1", 32), weight("K2", 64, 32, 3, 3), weight("B2", 64),
         weight("K3", 64, 64, 3, 3), weight("B3", 64), weight("G", 64, 10), weight("GB", 10)],
    )
    return graph, (3, 64, 64)


MODELS = {"mlp": mlp, "cnn": cnn}
KINDS = {
    "cpu": "instance_group [ { kind: KIND_CPU count: 1 } ]",
    "gpu": "instance_group [ { kind: KIND_GPU count: 2 } ]",
}


def build(repo):
    shapes = {}
    for name, make in MODELS.items():
        graph, inner = make()
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        shapes[name] = inner
        for kind, group in KINDS.items():
            d = os.path.join(repo, f"{name}_{kind}")
            os.makedirs(os.path.join(d, "1"), exist_ok=True)
            onnx.save(model, os.path.join(d, "1", "model.onnx"))
            # Inputs and outputs are auto-completed from the model; only the placement is given.
            with open(os.path.join(d, "config.pbtxt"), "w") as f:
                # Heuristic cuDNN algorithm choice: the exhaustive default benchmarks every new
                # input shape once per instance, which dominates a short run with varying batches.
                f.write(f'platform: "onnxruntime_onnx"\nmax_batch_size: 32\ndynamic_batching {{ }}\n{group}\n'
                        'parameters { key: "cudnn_conv_algo_search" value: { string_value: "1" } }\n')
    return shapes


def infer(conn, model, x):
    """One binary-extension request; returns the FP32 output."""
    header = json.dumps({
        "inputs": [{"name": "X", "shape": list(x.shape), "datatype": "FP32", "parameters": {"binary_data_size": x.nbytes}}],
        "outputs": [{"name": "Y", "parameters": {"binary_data": True}}],
    }).encode()
    conn.request("POST", f"/v2/models/{model}/infer", body=header + x.tobytes(),
                 headers={"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        raise RuntimeError(f"{model}: HTTP {r.status}: {body[:300]!r}")
    n = int(r.getheader("Inference-Header-Content-Length"))
    meta = json.loads(body[:n])
    shape = meta["outputs"][0]["shape"]
    return np.frombuffer(body[n:], dtype=np.float32).reshape(shape)


def load(port, model, inner, concurrency, seconds, rows=1):
    latencies, errors = [], []
    stop = time.monotonic() + seconds

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port)
        x = RNG.standard_normal((rows, *inner)).astype(np.float32)
        mine = []
        try:
            while time.monotonic() < stop:
                t = time.perf_counter()
                infer(conn, model, x)
                mine.append(time.perf_counter() - t)
        except Exception as e:  # reported, not hidden
            errors.append(str(e))
        latencies.extend(mine)

    start = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    if errors:
        raise RuntimeError(errors[0])
    lat = np.array(latencies) * 1e6
    return len(lat) / elapsed, np.percentile(lat, 50), np.percentile(lat, 99)


def counters(port, model):
    """(count, ns) of compute_input/infer/output, and (rows, executions), so far."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.request("GET", f"/v2/models/{model}/stats")
    s = json.loads(conn.getresponse().read())["model_stats"][0]
    i = s["inference_stats"]
    phases = [(i[k]["count"], i[k]["ns"]) for k in ("compute_input", "compute_infer", "compute_output")]
    rows = sum(b["batch_size"] * b["compute_infer"]["count"] for b in s["batch_stats"])
    execs = sum(b["compute_infer"]["count"] for b in s["batch_stats"])
    return phases, (rows, execs)


def server_times(before, after):
    """Per-request µs of each phase and the mean batch size between two `counters` readings."""
    per = [(a[1] - b[1]) / max(a[0] - b[0], 1) / 1e3 for b, a in zip(before[0], after[0])]
    rows, execs = after[1][0] - before[1][0], after[1][1] - before[1][1]
    return (*per, rows / max(execs, 1))


def main():
    binary, library = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 5.0
    if len(sys.argv) > 4:
        for kind in set(KINDS) - set(sys.argv[4].split(",")):
            del KINDS[kind]
    gpu = "gpu" if "gpu" in KINDS else "cpu"
    repo = tempfile.mkdtemp()
    shapes = build(repo)
    port = 18650
    log = open(os.path.join(repo, "nereus.log"), "w")
    server = subprocess.Popen([binary, "serve", "--model-repository", repo, "--http-address", "127.0.0.1",
                               "--http-port", str(port), "--grpc-port", str(port + 1), "--allow-metrics=false",
                               "--onnxruntime-library", library], stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(300):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port)
                c.request("GET", "/v2/health/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("server not ready: " + open(os.path.join(repo, "nereus.log")).read()[-2000:])
        c = http.client.HTTPConnection("127.0.0.1", port)
        c.request("GET", f"/v2/models/cnn_{gpu}/config")
        group = json.loads(c.getresponse().read())["instance_group"]
        print(f"cnn_{gpu} instance_group: {json.dumps(group)}")

        # Correctness: the GPU's answers against onnxruntime on the CPU in Python.
        print(f"\n| model ({gpu}) | batch | max relative error vs onnxruntime (CPU, Python) |\n|---|---|---|")
        for name in MODELS:
            session = onnxruntime.InferenceSession(os.path.join(repo, f"{name}_{gpu}", "1", "model.onnx"))
            conn = http.client.HTTPConnection("127.0.0.1", port)
            for batch in (1, 7):
                x = RNG.standard_normal((batch, *shapes[name])).astype(np.float32)
                expected = session.run(["Y"], {"X": x})[0]
                got = infer(conn, f"{name}_{gpu}", x)
                np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5, err_msg=f"{name} batch {batch}")
                rel = np.max(np.abs(got - expected) / np.maximum(np.abs(expected), 1e-6))
                print(f"| {name} | {batch} | {rel:.2e} |")

        print(f"\n{seconds:g} s per point after as long a warm-up, HTTP binary tensors; server times are per"
              " request from its statistics (µs)\n")
        print("| model | kind | concurrency | rows/request | req/s | rows/s | p50 µs | p99 µs | compute_input | compute_infer | compute_output | mean batch (rows) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name in MODELS:
            for kind in KINDS:
                model = f"{name}_{kind}"
                for concurrency, rows in ((1, 1), (16, 1), (4, 16)):
                    # Warm-up as long as the measurement: each new batch shape costs ORT (and cuDNN)
                    # a one-time setup per instance.
                    load(port, model, shapes[name], concurrency, seconds, rows)
                    before = counters(port, model)
                    rps, p50, p99 = load(port, model, shapes[name], concurrency, seconds, rows)
                    ci, cf, co, mb = server_times(before, counters(port, model))
                    print(f"| {name} | {kind} | {concurrency} | {rows} | {rps:.0f} | {rps * rows:.0f} | {p50:.0f} | {p99:.0f} "
                          f"| {ci:.1f} | {cf:.1f} | {co:.1f} | {mb:.2f} |")
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


if __name__ == "__main__":
    main()
