"""Triton's own Python clients (HTTP and gRPC), unchanged, against nereus serving Triton's example ONNX
models (tests/onnx_models, copied unmodified) through the ONNX Runtime backend.

Usage: python test_tritonclient_onnx.py HTTP_HOST:PORT GRPC_HOST:PORT
"""
import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient


def check(client, module, proto):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    # simple and simple_int8: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1
    for model, dtype, wire in (("simple", np.int32, "INT32"), ("simple_int8", np.int8, "INT8")):
        inputs = [module.InferInput("INPUT0", [1, 16], wire), module.InferInput("INPUT1", [1, 16], wire)]
        inputs[0].set_data_from_numpy(a.astype(dtype))
        inputs[1].set_data_from_numpy(b.astype(dtype))
        r = client.infer(model, inputs)
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), (a + b).astype(dtype), err_msg=f"{proto} {model}")
        np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), (a - b).astype(dtype), err_msg=f"{proto} {model}")
    # simple_string: the same over decimal strings
    inputs = [module.InferInput("INPUT0", [1, 16], "BYTES"), module.InferInput("INPUT1", [1, 16], "BYTES")]
    inputs[0].set_data_from_numpy(np.array([[str(x).encode() for x in a[0]]], dtype=np.object_))
    inputs[1].set_data_from_numpy(np.array([[str(x).encode() for x in b[0]]], dtype=np.object_))
    r = client.infer("simple_string", inputs)
    assert [int(x) for x in r.as_numpy("OUTPUT0")[0]] == list(a[0] + b[0]), (proto, r.as_numpy("OUTPUT0"))
    assert [int(x) for x in r.as_numpy("OUTPUT1")[0]] == list(a[0] - b[0]), (proto, r.as_numpy("OUTPUT1"))

    def step(model, seq_id, value, start=False, end=False):
        inp = module.InferInput("INPUT", [1, 1], "INT32")
        inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
        r = client.infer(model, [inp], sequence_id=seq_id, sequence_start=start, sequence_end=end)
        return int(r.as_numpy("OUTPUT")[0][0])

    # simple_sequence: OUTPUT = (INPUT + START) * READY, integer and string ids
    for seq_id in (17, f"{proto}-seq"):
        assert step("simple_sequence", seq_id, 5, start=True) == 6, (proto, seq_id)
        assert step("simple_sequence", seq_id, 5) == 5, (proto, seq_id)
        assert step("simple_sequence", seq_id, 2, end=True) == 2, (proto, seq_id)
    # simple_dyna_sequence: OUTPUT = (INPUT + START + END * CORRID) * READY, uint64 ids
    seq_id = 1000 if proto == "http" else 2000
    assert step("simple_dyna_sequence", seq_id, 5, start=True) == 6, proto
    assert step("simple_dyna_sequence", seq_id, 5) == 5, proto
    assert step("simple_dyna_sequence", seq_id, 5, end=True) == 5 + seq_id, proto


def main(http_url: str, grpc_url: str) -> None:
    check(httpclient.InferenceServerClient(url=http_url), httpclient, "http")
    check(grpcclient.InferenceServerClient(url=grpc_url), grpcclient, "grpc")
    print("tritonclient on Triton's example ONNX models: 1 passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
