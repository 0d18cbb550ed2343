# The large-tensor benchmark's reduce for Triton's python backend (bench/tensors.sh): OUTPUT0 = the sum of
# INPUT0's last axis (numpy, keepdims), as Nereus's reduce_sum_fp32 (Wasm) and reduce_sum_fp32_onnx.
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x.sum(axis=-1, keepdims=True, dtype=x.dtype))]))
        return out
