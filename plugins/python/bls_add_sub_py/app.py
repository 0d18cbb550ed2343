"""bls_add_sub_py: the Python twin of the Rust `bls_add_sub` (business logic scripting). It calls the
model `simple` (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1) twice:
A, B -> (sum, diff) -> (SUM2, DIFF2) = (2A, 2B), what the ensemble `ensemble_add_sub` computes.

Its configuration must allow the calls (`sandbox.callable_models: "simple"`); the model parameter
`bls.model` names another model of `simple`'s interface to call instead. A failed call fails the
request with the callee's error (`CallFailed`, passed on by the SDK).
"""
import nereus_sdk as nereus
from nereus_sdk import renamed


class Lifecycle(nereus.Backend):
    def setup_model(self, model):
        Lifecycle.callee = nereus.config_parameter(model, "bls.model") or "simple"

    def handle(self, request):
        a, b = request.input("A"), request.input("B")
        first = request.infer(Lifecycle.callee, [renamed(a, "INPUT0"), renamed(b, "INPUT1")])
        total, difference = first.output("OUTPUT0"), first.output("OUTPUT1")
        second = request.infer(Lifecycle.callee, [renamed(total, "INPUT0"), renamed(difference, "INPUT1")])
        return [renamed(second.output("OUTPUT0"), "SUM2"), renamed(second.output("OUTPUT1"), "DIFF2")]
