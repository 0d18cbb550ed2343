"""add_sub_py: Triton's `simple` model in Python, behaving as the Rust `add_sub` does.
OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, element-wise, for INT32 (wrapping) or
FP32 inputs of any shape, each request of a batch on its own.
"""
import array

import nereus_sdk as nereus
from nereus_sdk import DataType


def wrap32(x):
    return (x + 0x80000000) % 0x100000000 - 0x80000000


class Lifecycle(nereus.Backend):
    def setup_instance(self, model, instance):
        nereus.verbose(f"add_sub_py: instance {instance.name} of {model.name} ready")

    def handle(self, request):
        x, y = request.input("INPUT0"), request.input("INPUT1")
        if x.datatype not in (DataType.INT32, DataType.FP32):
            raise nereus.RequestError(f"add_sub supports INT32 and FP32, not DataType::{x.datatype.name.capitalize()}")
        if y.datatype != x.datatype:
            raise nereus.RequestError(f"tensor 'INPUT1' is {y.datatype.name}, not {x.datatype.name}")
        a, b = nereus.values(x), nereus.values(y)
        if len(a) != len(b):
            raise nereus.RequestError("INPUT0 and INPUT1 must have the same number of elements")
        # FP32 sums are rounded back to single precision by the array, as f32 arithmetic rounds.
        wrap = wrap32 if x.datatype == DataType.INT32 else float
        code = a.typecode
        outputs = []
        if request.wants("OUTPUT0"):
            outputs.append(nereus.tensor("OUTPUT0", x.shape, x.datatype, array.array(code, [wrap(p + q) for p, q in zip(a, b)])))
        if request.wants("OUTPUT1"):
            outputs.append(nereus.tensor("OUTPUT1", x.shape, x.datatype, array.array(code, [wrap(p - q) for p, q in zip(a, b)])))
        return outputs
