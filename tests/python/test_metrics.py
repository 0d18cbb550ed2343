"""The metrics endpoint as Prometheus reads it: the text parsed with the official Python client's
parser (prometheus_client.parser), tritonserver's families with their types, and values equal to
the requests sent through tritonclient over HTTP and gRPC.

Usage: python test_metrics.py HTTP_HOST:PORT GRPC_HOST:PORT METRICS_HOST:PORT
"""
import sys
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

TYPES = {
    "nv_inference_request_success": "counter",
    "nv_inference_request_failure": "counter",
    "nv_inference_count": "counter",
    "nv_inference_exec_count": "counter",
    "nv_inference_request_duration_us": "counter",
    "nv_inference_queue_duration_us": "counter",
    "nv_inference_compute_input_duration_us": "counter",
    "nv_inference_compute_infer_duration_us": "counter",
    "nv_inference_compute_output_duration_us": "counter",
    "nv_inference_pending_request_count": "gauge",
    "nv_model_load_duration_secs": "gauge",
    "nv_cpu_utilization": "gauge",
    "nv_cpu_memory_total_bytes": "gauge",
    "nv_cpu_memory_used_bytes": "gauge",
}


def scrape(url):
    text = urllib.request.urlopen(f"http://{url}/metrics", timeout=60).read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return families


def value(families, name, **labels):
    """The value of family `name`'s sample with `labels` (the parser names a counter's samples with
    the "_total" suffix it expects; the family keeps the name the server gave it)."""
    for sample in families[name].samples:
        if all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    raise AssertionError(f"no sample {name} {labels}")


def simple_inputs(module):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    return inputs


def main(http_url, grpc_url, metrics_url):
    before = scrape(metrics_url)
    for name, kind in TYPES.items():
        assert name in before, f"{name} missing"
        assert before[name].type == kind, f"{name}: {before[name].type}, expected {kind}"
    start = value(before, "nv_inference_request_success", model="simple", version="1")

    http = httpclient.InferenceServerClient(http_url)
    grpc = grpcclient.InferenceServerClient(grpc_url)
    for _ in range(3):
        http.infer("simple", simple_inputs(httpclient))
        grpc.infer("simple", simple_inputs(grpcclient))

    after = scrape(metrics_url)
    success = value(after, "nv_inference_request_success", model="simple", version="1")
    assert success - start == 6, f"success went from {start} to {success}"
    assert value(after, "nv_inference_exec_count", model="simple", version="1") >= 6
    for reason in ("REJECTED", "CANCELED", "BACKEND", "OTHER"):
        value(after, "nv_inference_request_failure", model="simple", version="1", reason=reason)
    print("metrics: parsed by prometheus_client, values as sent")


if __name__ == "__main__":
    main(*sys.argv[1:4])
