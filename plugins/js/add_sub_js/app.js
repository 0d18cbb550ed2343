// add_sub_js: Triton's `simple` model in JavaScript, behaving as the Rust `add_sub` does.
// OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, element-wise, for INT32 (wrapping, as
// Int32Array stores) or FP32 (rounded to single precision, as Float32Array stores) inputs of any
// shape, each request of a batch on its own. Plain loops over typed arrays: the engines interpret
// (no JIT in WebAssembly), and a callback per element (`map`) costs more than the arithmetic.
import { backend, RequestError, tensor, values, verbose } from './nereus_sdk.js';

function handle(request) {
  const x = request.input('INPUT0');
  const y = request.input('INPUT1');
  if (x.datatype !== 'int32' && x.datatype !== 'fp32') {
    throw new RequestError(`add_sub supports INT32 and FP32, not DataType::${x.datatype[0].toUpperCase()}${x.datatype.slice(1)}`);
  }
  if (y.datatype !== x.datatype) throw new RequestError(`tensor 'INPUT1' is ${y.datatype}, not ${x.datatype}`);
  const a = values(x);
  const b = values(y);
  const n = a.length;
  if (n !== b.length) throw new RequestError('INPUT0 and INPUT1 must have the same number of elements');
  // Both in one loop, each element read once: with the SDK making a request's parameters only when
  // asked for, 6-12% less time an execution than a loop per output (in process, 4 rounds).
  const sums = new a.constructor(n);
  const differences = new a.constructor(n);
  for (let i = 0; i < n; i++) {
    const p = a[i];
    const q = b[i];
    sums[i] = p + q;
    differences[i] = p - q;
  }
  const outputs = [];
  if (request.wants('OUTPUT0')) outputs.push(tensor('OUTPUT0', x.shape, x.datatype, sums));
  if (request.wants('OUTPUT1')) outputs.push(tensor('OUTPUT1', x.shape, x.datatype, differences));
  return outputs;
}

export const lifecycle = backend({
  setupInstance(model, instance) {
    verbose(`add_sub_js: instance ${instance.name} of ${model.name} ready`);
  },
  handle,
});
