"""Triton's own Python gRPC client (tritonclient[grpc]), unchanged, against a running nereus.

Usage: python test_tritonclient_grpc.py HOST:PORT
"""
import queue
import sys
from functools import partial

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

TIMEOUT_S = 60


def simple_inputs(a, b):
    inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def collect(q, result, error):
    """tritonclient calls callbacks as callback(result=..., error=...)."""
    q.put((result, error))


def main(url: str) -> None:
    client = grpcclient.InferenceServerClient(url=url)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    assert "statistics" in client.get_server_metadata().extensions
    meta = client.get_model_metadata("simple")
    assert meta.name == "simple" and [i.name for i in meta.inputs] == ["INPUT0", "INPUT1"], meta
    assert client.get_model_config("simple").config.max_batch_size == 8
    assert any(m.name == "simple" for m in client.get_model_repository_index().models)

    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    result = client.infer("simple", simple_inputs(a, b), request_id="g1",
                          outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert result.get_response().id == "g1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0") is None
    # the classification extension: the top classes of OUTPUT0 (= 3..18) as "value:index"
    result = client.infer("simple", simple_inputs(a, b),
                          outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=3)])
    classes = result.as_numpy("OUTPUT0")
    assert classes.shape == (1, 3) and [c.decode() for c in classes[0]] == ["18:15", "17:14", "16:13"], classes

    # async infer
    done = queue.Queue()
    client.async_infer("simple", simple_inputs(a, b), partial(collect, done))
    r, e = done.get(timeout=TIMEOUT_S)
    assert e is None, e
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + b)

    # the dynamic batcher: concurrent requests with the schedule-policy parameters each get their own answer
    batched = queue.Queue()
    for k in range(16):
        client.async_infer("simple_dyna", simple_inputs(a, np.full((1, 16), k, dtype=np.int32)),
                           partial(collect, batched), request_id=f"d{k}", priority=1, timeout=10_000_000)
    for _ in range(16):
        r, e = batched.get(timeout=TIMEOUT_S)
        assert e is None, e
        k = int(r.get_response().id[1:])
        np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), a + k)

    # a sequence through accumulate_state (implicit state kept by the server), string and integer ids
    for seq_id in (2002, "grpc-seq"):
        total = 0
        for k, value in enumerate((1, 2, 3)):
            inp = grpcclient.InferInput("INPUT", [1, 1], "INT32")
            inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            r = client.infer("accumulate_state", [inp], sequence_id=seq_id, sequence_start=k == 0, sequence_end=k == 2)
            total += value
            assert r.as_numpy("OUTPUT")[0][0] == total, (seq_id, r.as_numpy("OUTPUT"))

    # streaming: several requests on one stream, one of them failing
    streamed = queue.Queue()
    client.start_stream(callback=partial(collect, streamed))
    for i in range(3):
        client.async_stream_infer("simple", simple_inputs(a, np.full((1, 16), i, dtype=np.int32)), request_id=f"s{i}")
    bad = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    bad.set_data_from_numpy(a.astype(np.float32))
    client.async_stream_infer("simple", [bad], request_id="bad")
    ok, errors = {}, 0
    for _ in range(4):
        r, e = streamed.get(timeout=TIMEOUT_S)
        if e is not None:
            errors += 1
            assert "INPUT1" in str(e) or "FP32" in str(e), e
        else:
            ok[r.get_response().id] = r.as_numpy("OUTPUT0")
    client.stop_stream()
    assert errors == 1 and sorted(ok) == ["s0", "s1", "s2"], (errors, ok.keys())
    for i in range(3):
        np.testing.assert_array_equal(ok[f"s{i}"], a + i)

    # a decoupled model through the streaming API: every response, then the empty final one
    repeated = queue.Queue()
    client.start_stream(callback=partial(collect, repeated))
    values = np.array([4, 2, 0, 1], dtype=np.int32)
    inputs = [grpcclient.InferInput("IN", [4], "INT32"), grpcclient.InferInput("DELAY", [4], "UINT32"),
              grpcclient.InferInput("WAIT", [1], "UINT32")]
    inputs[0].set_data_from_numpy(values)
    inputs[1].set_data_from_numpy(np.array([1, 2, 3, 4], dtype=np.uint32))
    inputs[2].set_data_from_numpy(np.array([5], dtype=np.uint32))
    client.async_stream_infer("repeat_int32", inputs, request_id="rep", enable_empty_final_response=True)
    outs = []
    while True:
        r, e = repeated.get(timeout=TIMEOUT_S)
        assert e is None, e
        final = r.get_response().parameters["triton_final_response"].bool_param
        if final:
            assert r.as_numpy("OUT") is None
            break
        outs.append((int(r.as_numpy("OUT")[0]), int(r.as_numpy("IDX")[0])))
    client.stop_stream()
    assert outs == [(4, 0), (2, 1), (0, 2), (1, 3)], outs

    # BYTES
    text = grpcclient.InferInput("INPUT0", [2], "BYTES")
    text.set_data_from_numpy(np.array([b"grpc", b"nereus"], dtype=np.object_))
    r = client.infer("string_upper", [text])
    assert [x.decode() for x in r.as_numpy("OUTPUT0")] == ["GRPC", "NEREUS"]

    stats = client.get_inference_statistics("simple")
    assert stats.model_stats[0].inference_count >= 5, stats

    try:
        client.infer("no_such_model", simple_inputs(a, b))
        raise AssertionError("unknown model must fail")
    except InferenceServerException as e:
        assert "no_such_model" in str(e), e
    print("tritonclient[grpc]: 1 passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1])
