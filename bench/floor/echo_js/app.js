// echo_js: the least a JavaScript backend can do per request, for bench/languages.sh's floor row. No
// SDK: `execute` answers each request with its two inputs as OUTPUT0 and OUTPUT1, so what it costs is
// the toolchain's own (entering the engine, QuickJS unless NEREUS_JS_ENGINE says otherwise, and the
// bindings building JS objects for the request's records and reading the response's back), which no
// plugin code can go below.
import { sendResponse } from 'nereus:backend/host@1.2.0';

export const lifecycle = {
  initializeBackend(_name) {},
  finalizeBackend() {},
  initializeModel(_model) {},
  finalizeModel() {},
  initializeInstance(_instance) {},
  finalizeInstance() {},
  execute(requests) {
    for (let i = 0; i < requests.length; i++) {
      const [x, y] = requests[i].inputs;
      const outputs = [
        { name: 'OUTPUT0', datatype: x.datatype, shape: x.shape, data: x.data },
        { name: 'OUTPUT1', datatype: y.datatype, shape: y.shape, data: y.data },
      ];
      sendResponse(i, { outputs, parameters: [] }, true);
    }
  },
};
