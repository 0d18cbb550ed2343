"""A stand-in for the OpenTelemetry Collector (`otelcol`) that qa/L0_trace's OpenTelemetry tests
start as `./otelcol --config ./trace-config.yaml`: test.sh downloads the real one from GitHub, which
this project's machines cannot reach. It does what that configuration asks of the collector and no
more, the way the collector does it:

- an OTLP/HTTP receiver (`receivers.otlp.protocols.http.endpoint`) taking
  `ExportTraceServiceRequest`s in protobuf (or OTLP JSON) on `POST /v1/traces`;
- the batch processor (`send_batch_size`, `timeout`): the resource spans received are held and
  written together once `send_batch_size` spans are held, or when its timer (every `timeout`,
  restarted by each flush) fires;
- the file exporter (`exporters.file.path`, truncated at start): each batch one line of OTLP JSON
  (lowerCamelCase, trace and span ids in hex, 64-bit integers as strings, enums as numbers).

As the collector's batch processor, it appends the resource spans of each request to the batch as
they came (it does not merge them), so spans that an exporter sends in two requests land in two
`resourceSpans` entries, as they would with the real collector. Decoding uses the official
OpenTelemetry protocol types (the `opentelemetry-proto` package).
"""
import argparse
import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ID_FIELDS = {"traceId", "spanId", "parentSpanId"}


def read_config(path):
    """The few settings trace-config.yaml gives, read without a YAML library: the receiver's
    endpoint, the batch size and timeout, and the file path."""
    text = open(path).read()

    def find(pattern, default=None):
        m = re.search(pattern, text, re.M)
        return m.group(1).strip().strip("\"'") if m else default

    endpoint = find(r"^\s+http:\s*\n\s+endpoint:\s*(\S+)", "0.0.0.0:4318")
    size = int(find(r"^\s+send_batch_size:\s*(\d+)", "8192"))
    timeout = find(r"^\s+timeout:\s*(\S+)", "200ms")
    seconds = float(timeout[:-2]) / 1000 if timeout.endswith("ms") else float(timeout.rstrip("s"))
    path = find(r"^\s+file:\s*\n\s+path:\s*(\S+)")
    host, port = endpoint.rsplit(":", 1)
    return (host, int(port)), size, seconds, path


def hex_ids(node):
    """OTLP JSON writes trace and span ids in hex where protobuf's JSON mapping writes base64."""
    if isinstance(node, dict):
        return {k: (base64.b64decode(v).hex() if k in ID_FIELDS and isinstance(v, str) else hex_ids(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [hex_ids(v) for v in node]
    return node


class Batch:
    """The batch processor and the file exporter. As the collector's, the processor flushes on a
    timer that runs from its start and restarts after every flush, or as soon as `size` spans are
    held; the exporter truncates its file when it starts (the file exporter's `append: false`)."""

    def __init__(self, size, timeout, path):
        self.size, self.timeout, self.path = size, timeout, path
        self.cond = threading.Condition()
        self.held = []  # ResourceSpans messages, as received
        self.spans = 0
        self.flushed = 0  # flushes so far: a flush by size restarts the timer
        open(self.path, "w").close()
        threading.Thread(target=self._tick, daemon=True).start()

    def add(self, request):
        with self.cond:
            for rs in request.resource_spans:
                self.held.append(rs)
                self.spans += sum(len(ss.spans) for ss in rs.scope_spans)
            if self.spans >= self.size:
                self._flush_locked()
                self.cond.notify_all()

    def _tick(self):
        with self.cond:
            while True:
                seen = self.flushed
                self.cond.wait(self.timeout)
                if self.flushed == seen:
                    self._flush_locked()

    def _flush_locked(self):
        self.flushed += 1
        if not self.held:
            return
        batch = ExportTraceServiceRequest()
        batch.resource_spans.extend(self.held)
        self.held, self.spans = [], 0
        doc = hex_ids(json_format.MessageToDict(batch, use_integers_for_enums=True))
        # The collector writes a root span's empty parentSpanId ("no parent"); protobuf's JSON
        # mapping leaves it out.
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for span in ss.get("spans", []):
                    span.setdefault("parentSpanId", "")
        with open(self.path, "a") as f:
            f.write(json.dumps(doc, separators=(",", ":")) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    args = ap.parse_args()
    address, size, timeout, path = read_config(args.config)
    batch = Batch(size, timeout, path)

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            request = ExportTraceServiceRequest()
            try:
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    json_format.Parse(body, request)
                else:
                    request.ParseFromString(body)
            except Exception as e:  # noqa: BLE001 - a bad export is the sender's 400
                self.send_error(400, str(e))
                return
            batch.add(request)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_):
            pass

    ThreadingHTTPServer(address, Receiver).serve_forever()


if __name__ == "__main__":
    main()
