"""Writes the ONNX models of Nereus's own among the test models (run with the `onnx` package:
python make_models.py). Each is tiny and hands back what the server fed it, so a test sees exactly
that:

- ragged/1: RAGGED_OUTPUT = RAGGED_INPUT (the requests' elements concatenated, scattered back in
  each request's shape by batch_output), and every batch input kind as one row per request: COUNT
  and END = COUNTS (BATCH_ELEMENT_COUNT) and ENDS (BATCH_ACCUMULATED_ELEMENT_COUNT), START = STARTS
  (BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO) without its last element, MAX = the length of
  MAX_SHAPED (BATCH_MAX_ELEMENT_COUNT_AS_SHAPE) for every request, ITEM = ITEM_SHAPES
  (BATCH_ITEM_SHAPE), FLAT = FLAT_SHAPES (BATCH_ITEM_SHAPE_FLATTEN) one item per row.
- initializer/1: OUTPUT = INPUT + INITIALIZER, INITIALIZER an initializer of ones that is also a
  graph input, so a request may override it (qa/L0_initializer_as_input's model, made the same way).
- scalar/1: OUTPUT = INPUT, both rank 0 (served with dims [ 1 ]).
- misdeclared/1: OUTPUT = INPUT concatenated with itself along the last axis, [batch, 2n], while
  the model declares OUTPUT [batch, n] like INPUT: a model whose declared shapes are wrong, which
  the server must still answer rightly when the client puts OUTPUT in shared memory (ONNX Runtime
  is handed a buffer of the declared shape first: host/src/backend/onnx/placed.rs).
"""
import os

import onnx
from onnx import TensorProto, helper

here = os.path.dirname(os.path.abspath(__file__))
fp32, int32 = TensorProto.FLOAT, TensorProto.INT32


def save(name, nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(here, name, "1", "model.onnx"))


column = helper.make_tensor("column", TensorProto.INT64, [2], [-1, 1])
first = helper.make_tensor("first", TensorProto.INT64, [1], [0])
all_but_last = helper.make_tensor("all_but_last", TensorProto.INT64, [1], [-1])
save(
    "ragged",
    [
        helper.make_node("Identity", ["RAGGED_INPUT"], ["RAGGED_OUTPUT"]),
        helper.make_node("Reshape", ["COUNTS", "column"], ["COUNT"]),
        helper.make_node("Reshape", ["ENDS", "column"], ["END"]),
        helper.make_node("Slice", ["STARTS", "first", "all_but_last"], ["starts"]),
        helper.make_node("Reshape", ["starts", "column"], ["START"]),
        # MAX_SHAPED's length, as FP32, in a [requests, 1] column.
        helper.make_node("Shape", ["MAX_SHAPED"], ["max_shape"]),
        helper.make_node("Cast", ["max_shape"], ["max"], to=fp32),
        helper.make_node("Shape", ["COUNT"], ["rows"]),
        helper.make_node("Expand", ["max", "rows"], ["MAX"]),
        helper.make_node("Identity", ["ITEM_SHAPES"], ["ITEM"]),
        helper.make_node("Reshape", ["FLAT_SHAPES", "column"], ["FLAT"]),
    ],
    [
        helper.make_tensor_value_info("RAGGED_INPUT", fp32, [-1]),
        helper.make_tensor_value_info("COUNTS", fp32, [-1]),
        helper.make_tensor_value_info("ENDS", int32, [-1]),
        helper.make_tensor_value_info("STARTS", fp32, [-1]),
        helper.make_tensor_value_info("MAX_SHAPED", fp32, [-1]),
        helper.make_tensor_value_info("ITEM_SHAPES", fp32, [-1, 1]),
        helper.make_tensor_value_info("FLAT_SHAPES", fp32, [-1]),
    ],
    [
        helper.make_tensor_value_info("RAGGED_OUTPUT", fp32, [-1]),
        helper.make_tensor_value_info("COUNT", fp32, [-1, 1]),
        helper.make_tensor_value_info("END", int32, [-1, 1]),
        helper.make_tensor_value_info("START", fp32, [-1, 1]),
        helper.make_tensor_value_info("MAX", fp32, [-1, 1]),
        helper.make_tensor_value_info("ITEM", fp32, [-1, 1]),
        helper.make_tensor_value_info("FLAT", fp32, [-1, 1]),
    ],
    [column, first, all_but_last],
)
save(
    "initializer",
    [helper.make_node("Add", ["INPUT", "INITIALIZER"], ["OUTPUT"])],
    [
        helper.make_tensor_value_info("INPUT", fp32, [5, 5]),
        helper.make_tensor_value_info("INITIALIZER", fp32, [5, 5]),
    ],
    [helper.make_tensor_value_info("OUTPUT", fp32, [5, 5])],
    [helper.make_tensor("INITIALIZER", fp32, [5, 5], [1.0] * 25)],
)
save(
    "scalar",
    [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])],
    [helper.make_tensor_value_info("INPUT", fp32, [])],
    [helper.make_tensor_value_info("OUTPUT", fp32, [])],
)
save(
    "misdeclared",
    [helper.make_node("Concat", ["INPUT", "INPUT"], ["OUTPUT"], axis=-1)],
    [helper.make_tensor_value_info("INPUT", fp32, ["batch", "n"])],
    [helper.make_tensor_value_info("OUTPUT", fp32, ["batch", "n"])],
)
