"""System shared memory through Triton's own Python clients and their shm utilities: inputs read
from and outputs written to POSIX shared-memory regions the client registers, over HTTP and gRPC,
with the region status and unregistration. Needs a server started with --allow-client-shm=true
serving model_repository (model `simple`: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1).

Usage: python test_system_shm.py HTTP_URL GRPC_URL
"""
import os
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm


def run(module, client, tag):
    client.unregister_system_shared_memory()
    key_in, key_out = f"/nereus_{tag}_in_{os.getpid()}", f"/nereus_{tag}_out_{os.getpid()}"
    in_handle = shm.create_shared_memory_region(f"{tag}_in", key_in, 128)
    out_handle = shm.create_shared_memory_region(f"{tag}_out", key_out, 128)
    try:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        b = np.full((1, 16), 3, dtype=np.int32)
        shm.set_shared_memory_region(in_handle, [a])
        shm.set_shared_memory_region(in_handle, [b], offset=64)
        client.register_system_shared_memory(f"{tag}_in", key_in, 128)
        client.register_system_shared_memory(f"{tag}_out", key_out, 128)
        status = client.get_system_shared_memory_status()
        names = sorted(r["name"] for r in status) if module is httpclient else sorted(status.regions)
        assert names == [f"{tag}_in", f"{tag}_out"], names

        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory(f"{tag}_in", 64)
        inputs[1].set_shared_memory(f"{tag}_in", 64, offset=64)
        outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory(f"{tag}_out", 64)
        outputs[1].set_shared_memory(f"{tag}_out", 64, offset=64)
        result = client.infer("simple", inputs, outputs=outputs)
        out0 = result.get_output("OUTPUT0")
        size = out0["parameters"]["shared_memory_byte_size"] if module is httpclient \
            else out0.parameters["shared_memory_byte_size"].int64_param
        assert size == 64, size
        total = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16])
        diff = shm.get_contents_as_numpy(out_handle, np.int32, [1, 16], offset=64)
        np.testing.assert_array_equal(total, a + b)
        np.testing.assert_array_equal(diff, a - b)

        # A range past the region is the client's error.
        bad = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
        bad[0].set_shared_memory(f"{tag}_in", 64, offset=100)
        bad[1].set_shared_memory(f"{tag}_in", 64)
        try:
            client.infer("simple", bad)
            raise AssertionError("a range past the region was accepted")
        except Exception as e:  # tritonclient's InferenceServerException
            assert "Invalid offset + byte size for shared memory region" in str(e), str(e)

        client.unregister_system_shared_memory(f"{tag}_in")
        status = client.get_system_shared_memory_status()
        names = sorted(r["name"] for r in status) if module is httpclient else sorted(status.regions)
        assert names == [f"{tag}_out"], names
        client.unregister_system_shared_memory()
    finally:
        shm.destroy_shared_memory_region(in_handle)
        shm.destroy_shared_memory_region(out_handle)


def main(http_url, grpc_url):
    run(httpclient, httpclient.InferenceServerClient(url=http_url), "http")
    run(grpcclient, grpcclient.InferenceServerClient(url=grpc_url), "grpc")
    print("system shared memory over HTTP and gRPC with tritonclient's shm utilities: 1 passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
