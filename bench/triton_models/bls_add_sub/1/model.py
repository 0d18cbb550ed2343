# Business Logic Scripting in Triton's python backend: calls `simple` twice with
# pb_utils.InferenceRequest(...).exec(), as Nereus's plugins/bls_add_sub does from its sandbox.
import triton_python_backend_utils as pb_utils


def call_simple(x, y):
    request = pb_utils.InferenceRequest(
        model_name="simple",
        requested_output_names=["OUTPUT0", "OUTPUT1"],
        inputs=[pb_utils.Tensor("INPUT0", x), pb_utils.Tensor("INPUT1", y)],
    )
    response = request.exec()
    if response.has_error():
        raise pb_utils.TritonModelException(response.error().message())
    return (
        pb_utils.get_output_tensor_by_name(response, "OUTPUT0").as_numpy(),
        pb_utils.get_output_tensor_by_name(response, "OUTPUT1").as_numpy(),
    )


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            total, diff = call_simple(a, b)
            sum2, diff2 = call_simple(total, diff)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM2", sum2),
                pb_utils.Tensor("DIFF2", diff2),
            ]))
        return responses
