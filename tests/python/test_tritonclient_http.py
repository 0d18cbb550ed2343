"""Triton's own Python HTTP client (tritonclient[http]), unchanged, against a running nereus.

Usage: python test_tritonclient_http.py HOST:PORT
"""
import sys

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def main(url: str) -> None:
    client = httpclient.InferenceServerClient(url=url)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    meta = client.get_server_metadata()
    assert "binary_tensor_data" in meta["extensions"], meta

    model_meta = client.get_model_metadata("simple")
    assert model_meta["name"] == "simple", model_meta
    assert [i["name"] for i in model_meta["inputs"]] == ["INPUT0", "INPUT1"], model_meta
    config = client.get_model_config("simple")
    assert config["max_batch_size"] == 8, config
    assert config["input"][0]["data_type"] == "TYPE_INT32", config

    # Triton's simple_http_infer_client.py, with binary and JSON tensors.
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    for binary in (True, False):
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary),
            httpclient.InferRequestedOutput("OUTPUT1", binary_data=not binary),
        ]
        result = client.infer("simple", inputs, outputs=outputs, request_id="py-1")
        assert result.get_response()["id"] == "py-1"
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)

    # the classification extension: the top classes of OUTPUT0 (= 1..16) as "value:index"
    for binary in (True, False):
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=2)]
        classes = client.infer("simple", inputs, outputs=outputs).as_numpy("OUTPUT0")
        assert classes.shape == (1, 2) and [c.decode() if isinstance(c, bytes) else c for c in classes[0]] == ["16:15", "15:14"], classes

    # compressed request and response
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("simple", inputs, request_compression_algorithm="gzip", response_compression_algorithm="deflate")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)

    # BYTES through the string_upper model
    text = np.array([b"hello", "wörld".encode()], dtype=np.object_)
    inp = httpclient.InferInput("INPUT0", [2], "BYTES")
    inp.set_data_from_numpy(text)
    result = client.infer("string_upper", [inp])
    assert [x.decode() for x in result.as_numpy("OUTPUT0")] == ["HELLO", "WÖRLD"], result.as_numpy("OUTPUT0")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.array([5, 5], dtype=np.int32))

    # the dynamic batcher: concurrent requests (with the schedule-policy parameters) each get their own answer
    client_pool = httpclient.InferenceServerClient(url=url, concurrency=8)
    pending = []
    for k in range(16):
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(np.full((1, 16), k, dtype=np.int32))
        pending.append((k, client_pool.async_infer("simple_dyna", inputs, priority=1, timeout=10_000_000)))
    for k, request in pending:
        np.testing.assert_array_equal(request.get_result().as_numpy("OUTPUT0"), a + k)
    client_pool.close()

    # sequences: the running sum kept by the plugin per CORRID (a UINT64 id), and by the server as
    # implicit state (any id)
    for model, seq_id in (("simple_sequence", 1001), ("accumulate_state", "http-seq")):
        total = 0
        for k, value in enumerate((5, 6, 7)):
            inp = httpclient.InferInput("INPUT", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            r = client.infer(model, [inp], sequence_id=seq_id, sequence_start=k == 0, sequence_end=k == 2)
            total += value
            assert r.as_numpy("OUTPUT")[0][0] == total, (seq_id, r.as_numpy("OUTPUT"))

    # errors surface as InferenceServerException with the server's message
    try:
        client.infer("simple", [inputs[0]])
        raise AssertionError("a request missing INPUT1 must fail")
    except InferenceServerException as e:
        assert "INPUT1" in str(e), e
    try:
        client.get_model_metadata("no_such_model")
        raise AssertionError("unknown model must fail")
    except InferenceServerException as e:
        assert "no_such_model" in str(e), e
    print("tritonclient[http]: 1 passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1])
