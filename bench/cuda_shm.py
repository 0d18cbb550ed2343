"""CUDA shared memory against system shared memory and HTTP binary tensors, on a machine with an
NVIDIA GPU (issue 28, item 5): one FP32 tensor of 1, 4, 16 and 64 MiB through the ONNX identity
(bench/model_repository/identity_fp32_onnx), served twice by one nereus:

- `identity_gpu`: KIND_GPU, two instances. From CUDA shared memory its inputs are copied device to
  device into ONNX Runtime's tensor and its output device to device into the client's buffer
  (src/device_io.rs); over HTTP or system shared memory the bytes go host -> device -> host.
- `identity_cpu`: KIND_CPU, two instances. From CUDA shared memory the server copies the input to
  the host and the output back to the device (the trip a KIND_GPU instance now avoids).

The client is tritonclient's own `cuda_shared_memory` utilities for the device buffers (allocated
with cudaMalloc and exported by IPC handle, unchanged), POSIX shared memory for the system regions,
and plain keep-alive HTTP/1.1 for the requests, one connection per client thread. Each point runs
SECONDS after registration; rounds alternate the paths' order; the report gives the medians, and
every point checks one answer byte for byte (the identity's output is its input).

Not a test: timings belong here. tests/cuda_shm.rs checks the behaviour.

Usage: python3 bench/cuda_shm.py NEREUS_BINARY ORT_GPU_LIBRARY [SECONDS] [ROUNDS] [SIZES] [CONCS]
  SIZES: MiB, comma-separated (default 1,4,16,64); CONCS: default 1,4
"""
import http.client
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing import shared_memory

import numpy as np

try:  # tritonclient's CUDA utilities need cuda-python (and a GPU to do anything)
    import tritonclient.utils.cuda_shared_memory as cudashm
except Exception as e:  # noqa: BLE001 - reported when a CUDA path is asked for
    cudashm = e

HERE = os.path.dirname(os.path.abspath(__file__))
PORT = 18100


def post(conn, path, body, headers=None):
    conn.request("POST", path, body=body, headers=headers or {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:300]!r}")
    return r, data


def get_json(path):
    c = http.client.HTTPConnection("127.0.0.1", PORT)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return json.loads(body)


def make_repo(root):
    src = os.path.join(HERE, "model_repository", "identity_fp32_onnx")
    config = open(os.path.join(src, "config.pbtxt")).read()
    config = "\n".join(l for l in config.splitlines() if not l.startswith("instance_group"))
    for name, group in (("identity_gpu", "KIND_GPU gpus: [ 0 ]"), ("identity_cpu", "KIND_CPU")):
        os.makedirs(os.path.join(root, name, "1"))
        shutil.copy(os.path.join(src, "1", "model.onnx"), os.path.join(root, name, "1", "model.onnx"))
        with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
            f.write(f'name: "{name}"\n{config}\ninstance_group [ {{ count: 2 kind: {group} }} ]\n')


def stats(model):
    s = get_json(f"/v2/models/{model}/stats")["model_stats"][0]["inference_stats"]
    return {k: (s[k]["count"], s[k]["ns"]) for k in ("success", "compute_input", "compute_infer", "compute_output", "queue")}


class Worker:
    """One client thread's connection and regions for one (path, size)."""

    def __init__(self, path, model, n, index):
        self.path, self.model, self.n = path, model, n
        self.bytes = n * 4
        self.data = (np.arange(n, dtype=np.float32) * (index + 1)).reshape(1, n)
        self.conn = http.client.HTTPConnection("127.0.0.1", PORT)
        self.names = []
        self.cuda = []
        self.sys = []
        tag = f"{path}_{n}_{index}"
        if path.startswith("cudashm"):
            if isinstance(cudashm, Exception):
                raise RuntimeError(f"tritonclient's CUDA shared memory utilities: {cudashm}")
            for role in ("in", "out"):
                name = f"c{tag}_{role}"
                handle = cudashm.create_shared_memory_region(name, self.bytes, 0)
                self.cuda.append(handle)
                raw = cudashm.get_raw_handle(handle).decode()
                post(self.conn, f"/v2/cudasharedmemory/region/{name}/register",
                     json.dumps({"raw_handle": {"b64": raw}, "device_id": 0, "byte_size": self.bytes}))
                self.names.append(name)
            cudashm.set_shared_memory_region(self.cuda[0], [self.data])
        elif path.startswith("sysshm"):
            for role in ("in", "out"):
                name = f"s{tag}_{role}"
                shm = shared_memory.SharedMemory(create=True, size=self.bytes, name=name)
                self.sys.append(shm)
                post(self.conn, f"/v2/systemsharedmemory/region/{name}/register",
                     json.dumps({"key": f"/{name}", "offset": 0, "byte_size": self.bytes}))
                self.names.append(name)
            np.ndarray((1, n), np.float32, buffer=self.sys[0].buf)[:] = self.data
        if self.names:
            place = lambda name: {"shared_memory_region": name, "shared_memory_byte_size": self.bytes}
            self.body = json.dumps({
                "inputs": [{"name": "INPUT0", "shape": [1, n], "datatype": "FP32", "parameters": place(self.names[0])}],
                "outputs": [{"name": "OUTPUT0", "parameters": place(self.names[1])}],
            }).encode()
            self.headers = {"Content-Type": "application/json", "Content-Length": str(len(self.body))}
        else:
            header = json.dumps({
                "inputs": [{"name": "INPUT0", "shape": [1, n], "datatype": "FP32",
                            "parameters": {"binary_data_size": self.bytes}}],
                "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}],
            }).encode()
            self.payload = self.data.tobytes()
            self.body = [header, self.payload]
            self.headers = {"Content-Type": "application/octet-stream",
                            "Inference-Header-Content-Length": str(len(header)),
                            "Content-Length": str(len(header) + len(self.payload))}
        self.url = f"/v2/models/{model}/infer"
        self.latencies = []
        self.last = None

    def once(self):
        body = self.body if isinstance(self.body, bytes) else iter(self.body)
        self.conn.request("POST", self.url, body=body, headers=self.headers)
        r = self.conn.getresponse()
        self.last = r.read()
        if r.status != 200:
            raise RuntimeError(f"{self.path}: {r.status} {self.last[:300]!r}")
        if not self.names:
            self.header_len = int(r.getheader("Inference-Header-Content-Length"))

    def run(self, until):
        while time.perf_counter() < until:
            t = time.perf_counter()
            self.once()
            self.latencies.append(time.perf_counter() - t)

    def check(self):
        """The last answer is the input, byte for byte."""
        if self.cuda:
            out = cudashm.get_contents_as_numpy(self.cuda[1], np.float32, [1, self.n])
        elif self.sys:
            out = np.ndarray((1, self.n), np.float32, buffer=self.sys[1].buf).copy()
        else:
            out = np.frombuffer(self.last[self.header_len:], np.float32).reshape(1, self.n)
        if not np.array_equal(out, self.data):
            raise RuntimeError(f"{self.path}: the answer is not the input")

    def close(self):
        for name in self.names:
            kind = "cudasharedmemory" if self.cuda else "systemsharedmemory"
            post(self.conn, f"/v2/{kind}/region/{name}/unregister", b"")
        for handle in self.cuda:
            cudashm.destroy_shared_memory_region(handle)
        for shm in self.sys:
            shm.close()
            shm.unlink()
        self.conn.close()


PATHS = {
    "http-gpu": "identity_gpu",
    "sysshm-gpu": "identity_gpu",
    "cudashm-gpu": "identity_gpu",
    "cudashm-cpu": "identity_cpu",
    "sysshm-cpu": "identity_cpu",
}
# BENCH_PATHS=a,b measures only those (e.g. the CPU paths where there is no GPU, to try the script).
if os.environ.get("BENCH_PATHS"):
    PATHS = {p: PATHS[p] for p in os.environ["BENCH_PATHS"].split(",")}


def point(path, mib, conc, seconds):
    n = mib * (1 << 20) // 4
    model = PATHS[path]
    workers = [Worker(path, model, n, i) for i in range(conc)]
    for w in workers:  # warm-up, and the first answer checked
        w.once()
        w.check()
    before = stats(model)
    until = time.perf_counter() + seconds
    start = time.perf_counter()
    threads = [threading.Thread(target=w.run, args=(until,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    after = stats(model)
    for w in workers:
        w.check()
    lat = sorted(l for w in workers for l in w.latencies)
    count = len(lat)
    for w in workers:
        w.close()
    done = after["success"][0] - before["success"][0]
    per = lambda k: (after[k][1] - before[k][1]) / max(1, after[k][0] - before[k][0]) / 1000
    return {
        "mbps": count * n * 4 / elapsed / 1e6,
        "p50_ms": lat[len(lat) // 2] * 1000 if lat else float("nan"),
        "requests": count,
        "server_requests": done,
        "input_us": per("compute_input"),
        "infer_us": per("compute_infer"),
        "output_us": per("compute_output"),
    }


def main():
    binary, ort = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    sizes = [int(x) for x in (sys.argv[5] if len(sys.argv) > 5 else "1,4,16,64").split(",")]
    concs = [int(x) for x in (sys.argv[6] if len(sys.argv) > 6 else "1,4").split(",")]
    root = tempfile.mkdtemp()
    make_repo(root)
    log = open(os.path.join(root, "nereus.log"), "w")
    server = subprocess.Popen(
        [binary, "serve", "--model-repository", root, "--onnxruntime-library", ort, "--allow-client-shm=true",
         "--http-port", str(PORT), "--grpc-port", str(PORT + 1), "--metrics-port", str(PORT + 2),
         "--http-max-input-size", str(1 << 30)],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        def ready(model):
            c = http.client.HTTPConnection("127.0.0.1", PORT)
            c.request("GET", f"/v2/models/{model}/ready")
            return c.getresponse().status == 200

        for attempt in range(1200):
            try:
                if all(ready(m) for m in set(PATHS.values())):
                    break
            except OSError:
                pass
            if server.poll() is not None or attempt == 1199:
                raise RuntimeError("the models did not get ready: " + open(log.name).read()[-4000:])
            time.sleep(0.1)
        group = get_json(f"/v2/models/{next(iter(PATHS.values()))}/config")["instance_group"]
        print(f"# CUDA shared memory vs system shared memory vs HTTP binary, {time.strftime('%Y-%m-%d')}\n")
        try:
            gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
        except OSError:
            gpu = "no nvidia-smi"
        print(f"Machine: {gpu}; {os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}). "
              f"identity_gpu instance_group: {json.dumps(group)}. {seconds:g} s per point after a checked "
              f"warm-up request per client thread; {rounds} rounds, the paths' order rotated each round; medians.\n")
        results = {}
        order = list(PATHS)
        for r in range(rounds):
            rotated = order[r % len(order):] + order[:r % len(order)]
            for mib in sizes:
                for conc in concs:
                    for path in rotated:
                        try:
                            res = point(path, mib, conc, seconds)
                        except Exception as e:  # noqa: BLE001 - one broken path must not hide the others
                            print(f"round {r + 1} {mib} MiB c={conc} {path}: FAILED {e!r}", file=sys.stderr, flush=True)
                            continue
                        results.setdefault((mib, conc, path), []).append(res)
                        print(f"round {r + 1} {mib} MiB c={conc} {path}: {res['mbps']:.0f} MB/s p50 {res['p50_ms']:.2f} ms "
                              f"(input {res['input_us']:.0f} us, infer {res['infer_us']:.0f} us, output {res['output_us']:.0f} us)",
                              file=sys.stderr, flush=True)
        print("| MiB | c | " + " | ".join(f"{p} MB/s (p50 ms)" for p in PATHS) + " | cudashm-gpu / sysshm-gpu | cudashm-gpu / cudashm-cpu |")
        print("|---|---|" + "---|" * (len(PATHS) + 2))
        med = lambda key, f: statistics.median(x[f] for x in results[key]) if key in results else float("nan")
        for mib in sizes:
            for conc in concs:
                cells = [f"{med((mib, conc, p), 'mbps'):,.0f} ({med((mib, conc, p), 'p50_ms'):.2f})" for p in PATHS]
                ratio = lambda a, b: med((mib, conc, a), "mbps") / med((mib, conc, b), "mbps")
                ratios = [f"{ratio(a, b):.2f}x" if a in PATHS and b in PATHS else "-"
                          for a, b in (("cudashm-gpu", "sysshm-gpu"), ("cudashm-gpu", "cudashm-cpu"))]
                print(f"| {mib} | {conc} | " + " | ".join(cells + ratios) + " |")
        print("\nServer time per request (statistics extension, medians of the rounds, µs): compute_input / compute_infer / compute_output\n")
        print("| MiB | c | " + " | ".join(PATHS) + " |")
        print("|---|---|" + "---|" * len(PATHS))
        for mib in sizes:
            for conc in concs:
                cells = [" / ".join(f"{med((mib, conc, p), k):.0f}" for k in ("input_us", "infer_us", "output_us"))
                         for p in PATHS]
                print(f"| {mib} | {conc} | " + " | ".join(cells) + " |")
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
        shutil.copy(log.name, os.environ.get("NEREUS_BENCH_LOG", os.path.join(root, "server.log")))


if __name__ == "__main__":
    main()
