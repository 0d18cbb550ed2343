#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus (fuzz/corpus/<target>/), checked in: well-formed inputs of
every framing and form the targets decode, for libFuzzer to mutate. Needs tritonclient[grpc] (for
Triton's own protobuf classes); scripts/test.sh's virtualenv has it.

    python3 fuzz/make_seeds.py
"""
import json
import pathlib
import struct

import tritonclient.grpc.service_pb2 as pb

root = pathlib.Path(__file__).resolve().parent
repo = root.parent


def write(target, name, data):
    d = root / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def i32(*v):
    return struct.pack(f"<{len(v)}i", *v)


def f32(*v):
    return struct.pack(f"<{len(v)}f", *v)


def strings(*v):
    return b"".join(struct.pack("<I", len(s)) + s for s in v)


# http_infer_body: first byte 0 = JSON, 1 = binary extension (then u16 header length), 2 = raw.
def http_json(name, body):
    write("http_infer_body", name, b"\0" + json.dumps(body).encode())


http_json("json_ints", {"id": "a", "inputs": [
    {"name": "INPUT0", "shape": [1, 3], "datatype": "INT32", "data": [1, 2, 3]},
    {"name": "INPUT1", "shape": [1, 2, 2], "datatype": "FP32", "data": [[0.5, 1.5], [2.5, -1e30]]}]})
http_json("json_params", {"parameters": {"sequence_id": 7, "sequence_start": True, "priority": 1, "timeout": 10,
                                          "binary_data_output": True, "custom": "x"},
                          "inputs": [{"name": "INPUT0", "shape": [2, 1], "datatype": "INT32", "data": [[1], [2]]},
                                     {"name": "INPUT1", "shape": [2, 2, 1], "datatype": "FP32", "data": [1, 2, 3, 4]},
                                     {"name": "TEXT", "shape": [2, 2], "datatype": "BYTES", "data": ["ab", "", "c", "d"]}],
                          "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}, {"name": "OUTPUT1"}]})
http_json("json_string_id", {"parameters": {"sequence_id": "seq-1", "sequence_end": True},
                             "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "INT32", "data": [9]},
                                        {"name": "INPUT1", "shape": [1, 2, 1], "datatype": "FP32", "data": [1, 2]}]})
header = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 2], "datatype": "INT32", "parameters": {"binary_data_size": 8}},
    {"name": "INPUT1", "shape": [1, 2, 1], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
    {"name": "HALF", "shape": [1, 4], "datatype": "FP16", "parameters": {"binary_data_size": 8}},
    {"name": "TEXT", "shape": [1, 2], "datatype": "BYTES", "parameters": {"binary_data_size": 13}}],
    "parameters": {"binary_data_output": True}}).encode()
binary = i32(5, -6) + f32(1.0, 2.0) + bytes(8) + strings(b"hello", b"")
write("http_infer_body", "binary_extension", b"\1" + struct.pack("<H", len(header)) + header + binary)
write("http_infer_body", "raw_binary", b"\2" + i32(1, 2, 3, 4))

# grpc_infer_request: ModelInferRequest messages, typed and raw.
def tensor(name, datatype, shape, **kw):
    t = pb.ModelInferRequest().InferInputTensor(name=name, datatype=datatype, shape=shape)
    for k, v in kw.items():
        getattr(t.contents, k).extend(v)
    return t


typed = pb.ModelInferRequest(model_name="fuzzed", id="t", inputs=[
    tensor("INPUT0", "INT32", [1, 2], int_contents=[1, 2]),
    tensor("INPUT1", "FP32", [1, 2, 1], fp32_contents=[0.5, 1.5]),
    tensor("TEXT", "BYTES", [1, 2], bytes_contents=[b"ab", b""])])
typed.parameters["sequence_id"].int64_param = 3
typed.parameters["sequence_start"].bool_param = True
typed.parameters["custom"].string_param = "x"
typed.outputs.add(name="OUTPUT0")
write("grpc_infer_request", "typed", typed.SerializeToString())
raw = pb.ModelInferRequest(model_name="fuzzed", model_version="1", inputs=[
    tensor("INPUT0", "INT32", [2, 1]), tensor("INPUT1", "FP32", [2, 2, 1]), tensor("HALF", "FP16", [2, 4])],
    raw_input_contents=[i32(1, 2), f32(1, 2, 3, 4), bytes(16)])
raw.parameters["sequence_id"].string_param = "s"
raw.parameters["priority"].uint64_param = 2
write("grpc_infer_request", "raw", raw.SerializeToString())

# bytes_elements: serialised BYTES tensors.
write("bytes_elements", "three", strings(b"a", b"", b"hello world"))
write("bytes_elements", "truncated", strings(b"abc")[:-1])
write("bytes_elements", "empty", b"")

# config_pbtxt: every configuration in the repository.
for path in sorted(repo.glob("**/config.pbtxt")):
    if "target" in path.parts or "fuzz" in path.parts:
        continue
    name = "_".join(path.relative_to(repo).parts[:-1])
    write("config_pbtxt", name, path.read_bytes())
