// nereus_sdk: the JavaScript counterpart of the Rust `nereus-sdk`, for backends built with
// componentize-js (StarlingMonkey). A backend module does
//
//   import { backend } from './nereus_sdk.js';
//   export const lifecycle = backend({ handle(request) { return [/* output tensors */]; } });
//
// `handle` gets one request and returns its output tensors (or `{ outputs, parameters }`); every
// request of a batch is answered on its own: a thrown `RequestError` fails that request with its kind,
// anything else thrown fails it as `internal` and logs the error's stack through the host log; running
// out of memory (the sandbox's `sandbox.memory_limit_mb`) ends the call, as a trap does.
// Optional hooks: `setupModel(model)` and `setupInstance(model, instance)`. Module state is per
// instance: every instance is its own sandbox. See docs/authoring/javascript.md.
import { isCancelled, log, sendError, sendResponse } from 'nereus:backend/host@1.2.0';

// The typed array of each numeric datatype (WebAssembly is little-endian, as the wire is).
const ARRAYS = {
  bool: Uint8Array, uint8: Uint8Array, uint16: Uint16Array, uint32: Uint32Array, uint64: BigUint64Array,
  int8: Int8Array, int16: Int16Array, int32: Int32Array, int64: BigInt64Array, fp32: Float32Array,
  fp64: Float64Array,
};

/** Fails one request with `message` and `kind` ('invalid-argument' by default: HTTP 400). */
export class RequestError extends Error {
  constructor(message, kind = 'invalid-argument') {
    super(message);
    this.kind = kind;
  }
}

export const info = (message) => log('info', message);
export const warn = (message) => log('warn', message);
export const error = (message) => log('error', message);
export const verbose = (message) => log('verbose', message);

/** A model `parameters` entry's string value, or undefined. */
export function configParameter(model, key) {
  return JSON.parse(model.configJson).parameters?.[key]?.string_value;
}

/** A numeric tensor's elements as a typed array: over the tensor's own bytes where the bindings gave
 *  them a buffer of their own, else over an aligned copy (never a view into a larger buffer). */
export function values(tensor) {
  const Kind = ARRAYS[tensor.datatype];
  if (!Kind) throw new RequestError(`tensor '${tensor.name}' is ${tensor.datatype}, not a numeric datatype`);
  const data = tensor.data;
  const bytes = data.byteOffset === 0 && data.buffer.byteLength === data.byteLength ? data : data.slice();
  return new Kind(bytes.buffer, bytes.byteOffset, bytes.byteLength / Kind.BYTES_PER_ELEMENT);
}

/** A numeric tensor from a typed array or an array of numbers, in row-major order. */
export function tensor(name, shape, datatype, elements) {
  const array = elements instanceof ARRAYS[datatype] ? elements : ARRAYS[datatype].from(elements);
  return { name, datatype, shape: Array.from(shape, BigInt), data: new Uint8Array(array.buffer, array.byteOffset, array.byteLength) };
}

/** A BYTES tensor's elements, as Uint8Arrays (Triton's serialisation: a 4-byte length before each). */
export function bytesElements(tensor) {
  if (tensor.datatype !== 'bytes') throw new RequestError(`tensor '${tensor.name}' is ${tensor.datatype}, not bytes`);
  const data = tensor.data;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const elements = [];
  for (let at = 0; at < data.byteLength;) {
    const length = view.getUint32(at, true);
    elements.push(data.subarray(at + 4, at + 4 + length));
    at += 4 + length;
  }
  return elements;
}

const utf8 = new TextEncoder();

/** A BYTES tensor from string (encoded as UTF-8) or Uint8Array elements. */
export function bytesTensor(name, shape, elements) {
  const raw = elements.map((e) => (typeof e === 'string' ? utf8.encode(e) : e));
  const data = new Uint8Array(raw.reduce((n, e) => n + 4 + e.byteLength, 0));
  const view = new DataView(data.buffer);
  let at = 0;
  for (const e of raw) {
    view.setUint32(at, e.byteLength, true);
    data.set(e, at + 4);
    at += 4 + e.byteLength;
  }
  return { name, datatype: 'bytes', shape: Array.from(shape, BigInt), data };
}

/** A response parameter from a boolean, an integer (BigInt or safe integer), a number or a string. */
export function parameter(key, value) {
  switch (typeof value) {
    case 'boolean': return { key, value: { tag: 'boolean', val: value } };
    case 'bigint': return { key, value: { tag: 'int64', val: value } };
    case 'number':
      return { key, value: Number.isInteger(value) ? { tag: 'int64', val: BigInt(value) } : { tag: 'double', val: value } };
    default: return { key, value: { tag: 'text', val: String(value) } };
  }
}

/** One request of a batch: its inputs by name, its parameters as JS values, and its sender. */
export class Request {
  constructor(index, raw) {
    this.index = index;
    this.raw = raw;
    this.id = raw.id;
    this.parameters = Object.fromEntries(raw.parameters.map((p) => [p.key, p.value.val]));
  }

  input(name) {
    const found = this.raw.inputs.find((t) => t.name === name);
    if (!found) throw new RequestError(`request has no input '${name}'`);
    return found;
  }

  /** Whether the client asked for output `name` (an empty list asks for every output). */
  wants(name) {
    return this.raw.requestedOutputs.length === 0 || this.raw.requestedOutputs.includes(name);
  }

  respond(outputs, parameters = []) {
    sendResponse(this.index, { outputs, parameters }, true);
  }

  fail(message, kind = 'invalid-argument') {
    sendError(this.index, kind, message);
  }

  isCancelled() {
    return isCancelled(this.index);
  }
}

// A lifecycle hook's exception becomes the load error, with its stack in the log.
function lifecycleCall(what, call) {
  try {
    call();
  } catch (e) {
    error(`${what} failed: ${e}\n${e?.stack ?? ''}`);
    throw `${e}`;
  }
}

/** The `lifecycle` export for a backend made of `hooks` (see the top of this file). */
export function backend(hooks) {
  let model;
  return {
    initializeBackend(_name) {},
    finalizeBackend() {},
    initializeModel(info) {
      model = info;
      if (hooks.setupModel) lifecycleCall('setupModel', () => hooks.setupModel(info));
    },
    finalizeModel() {},
    initializeInstance(instance) {
      if (hooks.setupInstance) lifecycleCall('setupInstance', () => hooks.setupInstance(model, instance));
    },
    finalizeInstance() {},
    execute(requests) {
      requests.forEach((raw, index) => {
        const request = new Request(index, raw);
        let answer;
        try {
          answer = hooks.handle(request);
        } catch (e) {
          // The sandbox's memory cap (SpiderMonkey throws the string "out of memory"): the batch
          // ends, and the host reports the limit and rebuilds the instance.
          if (e === 'out of memory' || e instanceof RangeError && /allocation|memory/i.test(e.message)) throw e;
          if (e instanceof RequestError) {
            request.fail(e.message, e.kind);
          } else {
            error(`request ${index} (${request.id || 'no id'}) threw ${e}\n${e?.stack ?? ''}`);
            request.fail(`${e}`, 'internal');
          }
          return;
        }
        const { outputs, parameters } = Array.isArray(answer) ? { outputs: answer } : answer;
        try {
          request.respond(outputs, parameters);
        } catch (e) {
          // The host refused the response (an invalid output); it has failed the request.
          warn(`request ${index}: response refused: ${e?.payload ?? e}`);
        }
      });
    },
  };
}
