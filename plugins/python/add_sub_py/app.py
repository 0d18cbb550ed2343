"""add_sub_py: Triton's `simple` model in Python, behaving as the Rust `add_sub` does.
OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, element-wise, for INT32 (wrapping) or
FP32 inputs of any shape, each request of a batch on its own.
"""
import array

import nereus_sdk as nereus
from nereus_sdk import DataType

MASK32 = 0xFFFFFFFF


class Lifecycle(nereus.Backend):
    def setup_instance(self, model, instance):
        nereus.verbose(f"add_sub_py: instance {instance.name} of {model.name} ready")

    def handle(self, request):
        x, y = request.input("INPUT0"), request.input("INPUT1")
        if x.datatype not in (DataType.INT32, DataType.FP32):
            raise nereus.RequestError(f"add_sub supports INT32 and FP32, not DataType::{x.datatype.name.capitalize()}")
        if y.datatype != x.datatype:
            raise nereus.RequestError(f"tensor 'INPUT1' is {y.datatype.name}, not {x.datatype.name}")
        if x.datatype == DataType.INT32:
            # Two's-complement wrapping: the same bytes read as unsigned, each result masked to 32 bits
            # in the comprehension itself (a function call per element cost a fifth of the execution).
            a, b = array.array("I", x.data), array.array("I", y.data)
        else:
            # FP32 sums are rounded back to single precision by the array, as f32 arithmetic rounds.
            a, b = nereus.values(x), nereus.values(y)
        if len(a) != len(b):
            raise nereus.RequestError("INPUT0 and INPUT1 must have the same number of elements")
        code = a.typecode
        outputs = []
        if request.wants("OUTPUT0"):
            sums = [(p + q) & MASK32 for p, q in zip(a, b)] if code == "I" else [p + q for p, q in zip(a, b)]
            outputs.append(nereus.tensor("OUTPUT0", x.shape, x.datatype, array.array(code, sums)))
        if request.wants("OUTPUT1"):
            differences = [(p - q) & MASK32 for p, q in zip(a, b)] if code == "I" else [p - q for p, q in zip(a, b)]
            outputs.append(nereus.tensor("OUTPUT1", x.shape, x.datatype, array.array(code, differences)))
        return outputs
