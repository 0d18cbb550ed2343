"""Server-side compute per image of one model: N sequential HTTP requests (binary extension) with one
image each, then (compute_infer ns delta) / (count delta) from GET /v2/models/M/stats. Standard
library only. Usage: python3 preprocess_compute.py HOST:PORT MODEL IMAGE_FILE [N]"""
import json
import sys
import time
import urllib.request


def stats(url, model):
    with urllib.request.urlopen(f"http://{url}/v2/models/{model}/stats") as r:
        s = json.load(r)["model_stats"][0]["inference_stats"]["compute_infer"]
    return s["count"], s["ns"]


def main():
    url, model, path = sys.argv[1:4]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 50
    data = open(path, "rb").read()
    tensor = len(data).to_bytes(4, "little") + data
    header = json.dumps({
        "inputs": [{"name": "IMAGE", "shape": [1, 1], "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(tensor)}}],
        "outputs": [{"name": "PIXELS", "parameters": {"binary_data": True}}],
    }).encode()
    body = header + tensor
    req = lambda: urllib.request.Request(  # noqa: E731
        f"http://{url}/v2/models/{model}/infer", data=body,
        headers={"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"})
    urllib.request.urlopen(req()).read()  # warm-up
    c0, n0 = stats(url, model)
    t0 = time.perf_counter()
    for _ in range(n):
        urllib.request.urlopen(req()).read()
    wall = (time.perf_counter() - t0) / n
    c1, n1 = stats(url, model)
    print(f"{model} {path.rsplit('/', 1)[-1]} compute_ms={(n1 - n0) / (c1 - c0) / 1e6:.2f} "
          f"client_ms={wall * 1e3:.2f} n={c1 - c0}")


if __name__ == "__main__":
    main()
