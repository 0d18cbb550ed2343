#!/usr/bin/env python3
"""A minimal OTLP/HTTP receiver for benchmarks: accepts POST /v1/traces (any body) and answers 200
with an empty ExportTraceServiceResponse, counting requests and bytes. Not a collector: it decodes
nothing, so that measuring a server's tracing cost does not measure a collector too.

    bench/otlp_sink.py PORT        (prints a line per 10 exports to stderr)
"""
import http.server
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    exports = 0
    received = 0

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        Sink.exports += 1
        Sink.received += n
        if Sink.exports % 10 == 0:
            print(f"otlp_sink: {Sink.exports} exports, {Sink.received} bytes", file=sys.stderr)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
