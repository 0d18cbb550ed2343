// bls_add_sub_js: the JavaScript twin of the Rust `bls_add_sub` (business logic scripting). It calls
// the model `simple` (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1) twice:
// A, B -> (sum, diff) -> (SUM2, DIFF2) = (2A, 2B), what the ensemble `ensemble_add_sub` computes.
//
// Its configuration must allow the calls (`sandbox.callable_models: "simple"`); the model parameter
// `bls.model` names another model of `simple`'s interface to call instead. A failed call fails the
// request with the callee's error (`CallFailed`, passed on by the SDK).
import { backend, configParameter, renamed } from './nereus_sdk.js';

let callee = 'simple';

export const lifecycle = backend({
  setupModel(model) {
    callee = configParameter(model, 'bls.model') ?? 'simple';
  },
  handle(request) {
    const a = request.input('A');
    const b = request.input('B');
    const first = request.infer(callee, [renamed(a, 'INPUT0'), renamed(b, 'INPUT1')]);
    const second = request.infer(callee, [renamed(first.output('OUTPUT0'), 'INPUT0'), renamed(first.output('OUTPUT1'), 'INPUT1')]);
    return [renamed(second.output('OUTPUT0'), 'SUM2'), renamed(second.output('OUTPUT1'), 'DIFF2')];
  },
});
