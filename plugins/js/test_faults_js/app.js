// test_faults_js: a JavaScript backend that misbehaves on request, to prove the sandbox holds for
// JavaScript as for Rust (plugins/test_faults). INPUT0 INT32 [-1] comes back as OUTPUT0, unless the
// request parameter `fault` says "loop" (never returns: the deadline stops it), "oom" (allocates
// without bound: the memory cap stops it), "throw" (an exception: that request fails, with the
// stack logged), "promise" (an async answer) or "not_a_tensor" (an output the bindings cannot take;
// the SDK fails that request instead of letting the engine's bindings trap).
import { backend, tensor, values } from './nereus_sdk.js';

function failOnPurpose() {
  throw new Error('test_faults_js: exception requested');
}

export const lifecycle = backend({
  handle(request) {
    const fault = request.parameters.fault ?? '';
    if (fault === 'loop') for (let x = 0; ; x += 1);
    if (fault === 'oom') {
      const hog = [];
      for (;;) hog.push(new Uint8Array(16 << 20).fill(1));
    }
    if (fault === 'throw') failOnPurpose();
    if (fault === 'promise') return Promise.resolve([]);
    if (fault === 'not_a_tensor') return [{ name: 'OUTPUT0', datatype: 'int32', shape: ['three'], data: [1, 2, 3] }];
    const x = request.input('INPUT0');
    return [tensor('OUTPUT0', x.shape, x.datatype, values(x))];
  },
});
