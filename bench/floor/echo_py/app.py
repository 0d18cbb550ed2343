"""echo_py: the least a Python backend can do per request, for bench/languages.sh's floor row. No SDK:
`execute` answers each request with its two inputs as OUTPUT0 and OUTPUT1, so what it costs is
componentize-py's own (entering the interpreter, the bindings building Python objects for the
request's records and reading the response's back), which no plugin code can go below."""
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.types import Response, Tensor


class Lifecycle(exports.Lifecycle):
    def initialize_backend(self, backend_name):
        pass

    def finalize_backend(self):
        pass

    def initialize_model(self, model):
        pass

    def finalize_model(self):
        pass

    def initialize_instance(self, instance):
        pass

    def finalize_instance(self):
        pass

    def execute(self, requests):
        for index, request in enumerate(requests):
            x, y = request.inputs
            outputs = [Tensor("OUTPUT0", x.datatype, x.shape, x.data), Tensor("OUTPUT1", y.datatype, y.shape, y.data)]
            host.send_response(index, Response(outputs, []), True)
