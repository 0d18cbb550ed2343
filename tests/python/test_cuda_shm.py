"""CUDA shared memory through Triton's own Python clients and tritonclient.utils.cuda_shared_memory,
unchanged: the client allocates device buffers, registers their IPC handles over HTTP and gRPC, and
`simple` (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1) reads its inputs from them and writes
its outputs into them. Needs a server started with --allow-client-shm=true serving model_repository,
an NVIDIA GPU, and the `cuda-python` package that tritonclient's CUDA utilities import; where either
is missing it says so and exits 0 (tests/cuda_shm.rs covers what can be checked without a GPU).

Usage: python test_cuda_shm.py HTTP_URL GRPC_URL
"""
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

try:
    import tritonclient.utils.cuda_shared_memory as cudashm
    from cuda.bindings import runtime as cudart

    err, count = cudart.cudaGetDeviceCount()
    if err != cudart.cudaError_t.cudaSuccess or count == 0:
        raise RuntimeError(f"no CUDA device ({err})")
except Exception as e:  # no cuda-python, no driver or no GPU
    print(f"skipping the CUDA shared memory client test: {e}")
    sys.exit(0)


def run(module, client, tag):
    client.unregister_cuda_shared_memory()
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    regions = {name: cudashm.create_shared_memory_region(f"{tag}_{name}", size, 0)
               for name, size in (("in", 128), ("sum", 64), ("diff", 64))}
    try:
        cudashm.set_shared_memory_region(regions["in"], [a, b])
        for name, handle in regions.items():
            size = 128 if name == "in" else 64
            client.register_cuda_shared_memory(f"{tag}_{name}", cudashm.get_raw_handle(handle), 0, size)
        status = client.get_cuda_shared_memory_status()
        names = sorted(r["name"] for r in status) if module is httpclient else sorted(status.regions)
        assert names == sorted(f"{tag}_{n}" for n in regions), names

        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory(f"{tag}_in", 64)
        inputs[1].set_shared_memory(f"{tag}_in", 64, offset=64)
        outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory(f"{tag}_sum", 64)
        outputs[1].set_shared_memory(f"{tag}_diff", 64)
        client.infer("simple", inputs, outputs=outputs)
        np.testing.assert_array_equal(cudashm.get_contents_as_numpy(regions["sum"], np.int32, [1, 16]), a + b)
        np.testing.assert_array_equal(cudashm.get_contents_as_numpy(regions["diff"], np.int32, [1, 16]), a - b)

        client.unregister_cuda_shared_memory(f"{tag}_in")
        status = client.get_cuda_shared_memory_status()
        names = sorted(r["name"] for r in status) if module is httpclient else sorted(status.regions)
        assert names == [f"{tag}_diff", f"{tag}_sum"], names
        client.unregister_cuda_shared_memory()
    finally:
        for handle in regions.values():
            cudashm.destroy_shared_memory_region(handle)


def main():
    http_url, grpc_url = sys.argv[1], sys.argv[2]
    run(httpclient, httpclient.InferenceServerClient(http_url), "http")
    run(grpcclient, grpcclient.InferenceServerClient(grpc_url), "grpc")
    print("CUDA shared memory through tritonclient: OK")


if __name__ == "__main__":
    main()
