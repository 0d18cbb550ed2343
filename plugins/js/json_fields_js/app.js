// json_fields_js: pulls a field out of JSON documents, as a preprocessing step before a model or
// after an upstream service. DOC (BYTES, one UTF-8 JSON document per batch row) -> VALUE (BYTES: the
// field's value, a string as it is and anything else as JSON text; "" when absent) and FOUND (BOOL).
//
// The field is a dotted path (`user.name`, `items.0.id`: a number indexes an array), the model
// parameter `field`, which the request parameter `field` overrides. The response parameter `missing`
// counts the documents without it. A document that is not UTF-8 or not JSON fails its request only,
// with the row and the parser's reason; the other requests of the batch are answered.
import { backend, bytesElements, bytesTensor, configParameter, info, parameter, RequestError, tensor, utf8Decode } from './nereus_sdk.js';

let defaultField;

function lookup(document, path) {
  let value = document;
  for (const key of path) {
    const container = value !== null && typeof value === 'object';
    if (!container || !Object.hasOwn(value, Array.isArray(value) ? Number(key) : key)) return undefined;
    value = value[Array.isArray(value) ? Number(key) : key];
  }
  return value;
}

function handle(request) {
  const field = request.parameters.field ?? defaultField;
  if (typeof field !== 'string' || field === '') throw new RequestError("parameter 'field' must be a non-empty string");
  const path = field.split('.');
  const doc = request.input('DOC');
  const values = [];
  const found = [];
  bytesElements(doc).forEach((raw, row) => {
    let document;
    try {
      document = JSON.parse(utf8Decode(raw));
    } catch (e) {
      throw new RequestError(`DOC[${row}] is not a JSON document: ${e.message}`);
    }
    const value = lookup(document, path);
    values.push(value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value));
    found.push(value === undefined ? 0 : 1);
  });
  const outputs = [];
  if (request.wants('VALUE')) outputs.push(bytesTensor('VALUE', doc.shape, values));
  if (request.wants('FOUND')) outputs.push(tensor('FOUND', doc.shape, 'bool', found));
  return { outputs, parameters: [parameter('missing', found.filter((f) => !f).length)] };
}

export const lifecycle = backend({
  setupModel(model) {
    defaultField = configParameter(model, 'field');
    info(`json_fields_js: default field ${JSON.stringify(defaultField ?? null)}`);
  },
  handle,
});
