"""Triton's own Python client examples (triton-inference-server/client, src/python/examples, copied
unchanged into tests/python/triton_client_examples/ with their licence), run against nereus as a
Triton user runs them. Each must exit 0, and those that end by printing "PASS" must print it (some
examples print an error and still exit 0).

The server serves model_repository/ with Triton's example ONNX models (tests/onnx_models) for the
names model_repository does not have in Triton's form (simple_string, simple_int8, simple_sequence),
with --allow-client-shm=true and --id triton (the health example insists on that name). Left out:
the model-control examples (scripts/test.sh runs them on servers of their own, in EXPLICIT mode),
and the sequence examples' --dyna variants (they need Triton's QA model simple_string_dyna_sequence,
which no repository here has). The CUDA shared-memory ones run where this process sees a CUDA device
through cuda-python, as tritonclient's CUDA utilities need, and are reported skipped elsewhere.

Usage: python test_triton_client_examples.py HTTP_HOST:PORT GRPC_HOST:PORT
"""
import os
import subprocess
import sys
import time

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "triton_client_examples")


def cuda_device():
    """Why the CUDA shared-memory examples cannot run here, or None where they can."""
    try:
        from cuda.bindings import runtime as cudart
        err, count = cudart.cudaGetDeviceCount()
        if err != cudart.cudaError_t.cudaSuccess or count == 0:
            return f"no CUDA device ({err})"
    except Exception as e:  # no cuda-python, or no driver
        return str(e)
    return None


def runs(http, grpc):
    """(script, arguments) for every example run."""
    out = []
    no_cuda = cuda_device()
    for script in sorted(os.listdir(HERE)):
        if not script.endswith(".py") or script.endswith("_model_control.py"):
            continue
        if script.endswith("_cudashm_client.py") and no_cuda:
            print(f"skip {script}: {no_cuda}")
            continue
        if script.startswith("simple_http_"):
            url = http
        elif script == "reuse_infer_objects_client.py":
            out.append((script, ["-i", "http", "-u", http]))
            out.append((script, ["-i", "grpc", "-u", grpc]))
            continue
        else:
            url = grpc
        out.append((script, ["-u", url]))
        if script in ("simple_http_infer_client.py", "simple_http_aio_infer_client.py"):
            # Compressed requests and responses, both codings, as these clients offer them.
            for coding in ("gzip", "deflate"):
                out.append((script, ["-u", url, "--request-compression-algorithm", coding,
                                     "--response-compression-algorithm", coding]))
        if script in ("simple_grpc_infer_client.py", "simple_grpc_aio_infer_client.py"):
            out.append((script, ["-u", url, "-C", "gzip"]))
    return out


def main(http, grpc):
    failures = []
    for script, args in runs(http, grpc):
        started = time.monotonic()
        p = subprocess.run([sys.executable, os.path.join(HERE, script), *args], capture_output=True,
                           text=True, timeout=120)
        text = p.stdout + p.stderr
        with open(os.path.join(HERE, script)) as f:
            wants_pass = "PASS" in f.read()
        ok = p.returncode == 0 and (not wants_pass or "PASS" in p.stdout)
        print(f"{'ok  ' if ok else 'FAIL'} {script} {' '.join(args)} ({time.monotonic() - started:.1f} s)")
        if not ok:
            failures.append((script, args, p.returncode, text))
    for script, args, code, text in failures:
        print(f"\n--- {script} {' '.join(args)}: exit {code}\n{text[-3000:]}")
    if failures:
        sys.exit(f"{len(failures)} of Triton's client examples failed")
    print("Triton's client examples: all passed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
