// nereus_sdk: the JavaScript counterpart of the Rust `nereus-sdk`, for backends built by
// plugins/build.sh with jco: QuickJS (componentize-qjs, the default) or StarlingMonkey
// (componentize-js). A backend module does
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
import { infer as inferModel, PendingCall } from 'nereus:backend/models@1.2.0';
// Staged beside this file by plugins/build.sh: the engine the component is built with.
import { engine } from './nereus_engine.js';

/** WIT's s64 and u64 as this engine's bindings carry them (shapes, int64 parameters): BigInt in
 *  StarlingMonkey's (jco's), Number in QuickJS's (exact up to 2^53). Each refuses the other. */
export const int64 = engine === 'starlingmonkey' ? BigInt : Number;

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
  return { name, datatype, shape, data: new Uint8Array(array.buffer, array.byteOffset, array.byteLength) };
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

/** A string's UTF-8 bytes: TextEncoder where the engine has one (StarlingMonkey), else the same
 *  encoding written out (QuickJS has none). A lone surrogate becomes U+FFFD, as TextEncoder does. */
export const utf8Encode = typeof TextEncoder === 'function'
  ? ((encoder) => (text) => encoder.encode(text))(new TextEncoder())
  : (text) => {
    const out = [];
    for (const ch of text) {
      let c = ch.codePointAt(0);
      if (c >= 0xd800 && c < 0xe000) c = 0xfffd;
      if (c < 0x80) out.push(c);
      else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
      else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    }
    return new Uint8Array(out);
  };

/** UTF-8 bytes as a string. Malformed UTF-8 (a bad or missing continuation byte, an overlong form,
 *  a surrogate, past U+10FFFF) throws a TypeError, as TextDecoder's `fatal` mode does: TextDecoder
 *  where the engine has one, else the same checks written out. */
export const utf8Decode = typeof TextDecoder === 'function'
  ? ((decoder) => (bytes) => decoder.decode(bytes))(new TextDecoder('utf-8', { fatal: true }))
  : (bytes) => {
    const bad = (at) => new TypeError(`The encoded data was not valid for encoding utf-8 (byte ${at})`);
    const parts = [];
    let points = [];
    for (let at = 0; at < bytes.length;) {
      const b = bytes[at];
      let extra;
      let min;
      if (b < 0x80) [extra, min] = [0, 0];
      else if (b >= 0xc2 && b < 0xe0) [extra, min] = [1, 0x80];
      else if (b >= 0xe0 && b < 0xf0) [extra, min] = [2, 0x800];
      else if (b >= 0xf0 && b < 0xf5) [extra, min] = [3, 0x10000];
      else throw bad(at);
      if (at + extra >= bytes.length) throw bad(at);
      let c = extra === 0 ? b : b & (0x3f >> extra);
      for (let k = 1; k <= extra; k++) {
        const next = bytes[at + k];
        if ((next & 0xc0) !== 0x80) throw bad(at + k);
        c = (c << 6) | (next & 63);
      }
      if (c < min || c > 0x10ffff || (c >= 0xd800 && c < 0xe000)) throw bad(at);
      points.push(c);
      // In chunks: String.fromCodePoint takes its code points as arguments.
      if (points.length === 4096) {
        parts.push(String.fromCodePoint(...points));
        points = [];
      }
      at += extra + 1;
    }
    parts.push(String.fromCodePoint(...points));
    return parts.join('');
  };

/** A BYTES tensor from string (encoded as UTF-8) or Uint8Array elements. */
export function bytesTensor(name, shape, elements) {
  const raw = elements.map((e) => (typeof e === 'string' ? utf8Encode(e) : e));
  const data = new Uint8Array(raw.reduce((n, e) => n + 4 + e.byteLength, 0));
  const view = new DataView(data.buffer);
  let at = 0;
  for (const e of raw) {
    view.setUint32(at, e.byteLength, true);
    data.set(e, at + 4);
    at += 4 + e.byteLength;
  }
  return { name, datatype: 'bytes', shape, data };
}

/** A response parameter from a boolean, an integer (BigInt or safe integer), a number or a string. */
export function parameter(key, value) {
  switch (typeof value) {
    case 'boolean': return { key, value: { tag: 'boolean', val: value } };
    case 'bigint': return { key, value: { tag: 'int64', val: int64(value) } };
    case 'number':
      return { key, value: Number.isInteger(value) ? { tag: 'int64', val: int64(value) } : { tag: 'double', val: value } };
    default: return { key, value: { tag: 'text', val: String(value) } };
  }
}

/** The same tensor under another name (to pass one model's output as another's input). */
export const renamed = (tensor, name) => ({ ...tensor, name });

/** A call to another model failed (`request.infer`, `call.wait()`): `kind` is the call error's kind
 *  ('not-allowed', 'cycle', 'too-deep', 'timeout', 'cancelled', or the callee's own
 *  'invalid-argument', 'not-found', 'unavailable', 'unsupported', 'internal') and the message names
 *  the model. Thrown out of `handle`, it fails that request with the matching status. */
export class CallFailed extends Error {
  constructor(error) {
    super(`${error.message} (${error.kind})`);
    this.kind = error.kind;
  }

  /** The request's error kind this failure passes on: the callee's own where it has one; a call the
   *  host refused (policy, cycle, depth) is internal; a deadline, a cancellation or a missing model
   *  makes the model unavailable for this request. */
  errorKind() {
    switch (this.kind) {
      case 'invalid-argument': return 'invalid-argument';
      case 'unsupported': return 'unsupported';
      case 'not-found': case 'unavailable': case 'timeout': case 'cancelled': return 'unavailable';
      default: return 'internal';
    }
  }
}

// A call's error as the bindings throw it (both engines: an Error whose `payload` is the WIT
// `call-error`); anything else (the engine out of memory) is thrown on as it is.
function callFailed(e) {
  if (typeof e?.payload?.kind === 'string') return new CallFailed(e.payload);
  return e;
}

/** A called model's response: its output tensors by name and its parameters as JS values. */
export class ModelResponse {
  constructor(raw) {
    this.raw = raw;
    this.outputs = Object.fromEntries(raw.outputs.map((t) => [t.name, t]));
    this.parameters = Object.fromEntries(raw.parameters.map((p) => [p.key, p.value.val]));
  }

  output(name) {
    const found = this.outputs[name];
    if (!found) throw new RequestError(`the called model's response has no output '${name}'`, 'internal');
    return found;
  }
}

/** A call in flight (`request.start`): `wait()` for a model's one response, or iterate
 *  `responses()` for a decoupled model's. */
export class Call {
  constructor(pending) {
    this.pending = pending;
  }

  wait() {
    try {
      return new ModelResponse(this.pending.wait());
    } catch (e) {
      throw callFailed(e);
    }
  }

  /** A decoupled callee's responses, one by one, until it completes the request. */
  *responses() {
    for (;;) {
      const answer = this.pending.next();
      if (answer == null) return;
      if (answer.tag === 'err') throw new CallFailed(answer.val);
      yield new ModelResponse(answer.val);
    }
  }

  isReady() {
    return this.pending.isReady();
  }
}

// The WIT request of a call: `request.infer`'s and `request.start`'s arguments.
function modelRequest(model, inputs, options = {}) {
  const { outputs = [], parameters = {}, version = 0, sequenceId, sequenceStart = false, sequenceEnd = false,
    timeoutMs = 0 } = options;
  let correlationId = { tag: 'none' };
  if (typeof sequenceId === 'number' || typeof sequenceId === 'bigint') {
    correlationId = { tag: 'numeric', val: int64(sequenceId) };
  } else if (sequenceId != null) {
    correlationId = { tag: 'text', val: String(sequenceId) };
  }
  return {
    model,
    version: int64(version),
    inputs: inputs.map((t) => wireTensor(t, 'input')),
    requestedOutputs: [...outputs],
    parameters: Object.entries(parameters).map(([key, value]) => parameter(key, value)),
    correlationId,
    flags: { start: sequenceStart, end: sequenceEnd },
    timeoutMs: int64(timeoutMs),
  };
}

/** One request of a batch: its inputs by name, its parameters as JS values, and its sender. */
export class Request {
  constructor(index, raw) {
    this.index = index;
    this.raw = raw;
    this.id = raw.id;
  }

  /** The request's parameters as JS values, made when first asked for (most plugins never ask). */
  get parameters() {
    const value = Object.fromEntries(this.raw.parameters.map((p) => [p.key, p.value.val]));
    Object.defineProperty(this, 'parameters', { value });
    return value;
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

  /** Sends the request's one response. The outputs are checked and their shapes converted to the
   *  engine's integers first (see `wireTensor`); a TypeError says what is wrong. */
  respond(outputs, parameters = []) {
    sendResponse(this.index, { outputs: outputs.map((t) => wireTensor(t, 'output')), parameters }, true);
  }

  fail(message, kind = 'invalid-argument') {
    sendError(this.index, ERROR_KINDS.has(kind) ? kind : 'internal', `${message}`);
  }

  isCancelled() {
    return isCancelled(this.index);
  }

  /** Runs another model on behalf of this request and waits for its response (business logic
   *  scripting): `inputs` are tensors named as the callee names them. Options: `outputs` (the
   *  names wanted; default all), `parameters` (an object), `version`, `sequenceId`,
   *  `sequenceStart`, `sequenceEnd`, `timeoutMs`. The model must be listed in this model's
   *  `sandbox.callable_models`. Returns a `ModelResponse`; throws `CallFailed`. */
  infer(model, inputs, options) {
    const request = modelRequest(model, inputs, options);
    try {
      return new ModelResponse(inferModel(this.index, request));
    } catch (e) {
      throw callFailed(e);
    }
  }

  /** Starts a call as `infer` does without waiting for it (start several, then wait for each: a
   *  fan-out). Returns a `Call`; throws `CallFailed` when the call cannot start. */
  start(model, inputs, options) {
    const request = modelRequest(model, inputs, options);
    try {
      return new Call(PendingCall.start(this.index, request));
    } catch (e) {
      throw callFailed(e);
    }
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

/** Whether `e` is the engine running out of memory (the sandbox's cap), not the plugin's own error. */
function outOfMemory(e) {
  return e === 'out of memory' || (e instanceof RangeError && /allocation|memory/i.test(e.message))
    || (e?.name === 'InternalError' && /out of memory/i.test(e.message));
}

// Every datatype name of the WIT `data-type` enum.
const DATATYPES = new Set([...Object.keys(ARRAYS), 'fp16', 'bf16', 'bytes']);

// `handle`'s answer as `{ outputs, parameters }`, its form checked (each tensor is checked by
// `respond`): a value of the wrong shape would make QuickJS's bindings trap (the instance rebuilt,
// the request failed with a trap), where this fails the request alone with what is wrong.
function response(answer) {
  if (typeof answer?.then === 'function') throw new TypeError('handle returned a Promise: it must answer synchronously');
  const { outputs, parameters = [] } = Array.isArray(answer) ? { outputs: answer } : (answer ?? {});
  if (!Array.isArray(outputs)) {
    throw new TypeError('handle must return an array of output tensors or { outputs, parameters }');
  }
  if (!Array.isArray(parameters)) throw new TypeError('response parameters must be an array of parameter(key, value)');
  return { outputs, parameters };
}

// A tensor as the bindings take it, checked, its shape in the engine's integers: the one place every
// tensor leaving the plugin (a response's outputs, a call's inputs) passes, so that no malformed
// value reaches bindings that would trap on it. A shape may be an array or a typed array, and the data any view of the bytes: StarlingMonkey's
// bindings give a request's shapes as a BigInt64Array and its data as a view that is not this
// realm's Uint8Array.
function wireTensor(t, what) {
  const shape = Array.isArray(t?.shape) || ArrayBuffer.isView(t?.shape) ? Array.from(t.shape) : undefined;
  const data = t?.data instanceof Uint8Array ? t.data
    : ArrayBuffer.isView(t?.data) ? new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength) : undefined;
  if (typeof t?.name !== 'string' || !DATATYPES.has(t.datatype) || !data
    || !shape?.every((d) => Number.isInteger(Number(d)))) {
    throw new TypeError(`${what} ${JSON.stringify(t?.name)} is not a tensor { name, datatype, shape, data: Uint8Array }`);
  }
  return { name: t.name, datatype: t.datatype, shape: shape.map(int64), data };
}

// The error kinds of the WIT `error-kind` enum; any other kind a plugin names fails as internal.
const ERROR_KINDS = new Set(['invalid-argument', 'internal', 'unavailable', 'unsupported']);

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
          answer = response(hooks.handle(request));
        } catch (e) {
          // The sandbox's memory cap (SpiderMonkey throws the string "out of memory", QuickJS an
          // InternalError): the batch ends, and the host reports the limit and rebuilds the instance.
          if (outOfMemory(e)) throw e;
          if (e instanceof RequestError) {
            request.fail(e.message, e.kind);
          } else if (e instanceof CallFailed) {
            request.fail(e.message, e.errorKind());
          } else {
            error(`request ${index} (${request.id || 'no id'}) threw ${e}\n${e?.stack ?? ''}`);
            request.fail(`${e}`, 'internal');
          }
          return;
        }
        try {
          request.respond(answer.outputs, answer.parameters);
        } catch (e) {
          if (e?.payload !== undefined) {
            // The host refused the response (an invalid output); it has failed the request.
            warn(`request ${index}: response refused: ${e.payload}`);
          } else {
            // An output the SDK's check refused: the host never saw it.
            request.fail(`${e}`, 'internal');
          }
        }
      });
    },
  };
}
