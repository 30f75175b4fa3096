"""An OTLP/HTTP metrics receiver for the otlp exporter's tests.

Every POST is decoded with the official OpenTelemetry protobuf definitions (the
`opentelemetry-proto` package from PyPI): gunzipped when `Content-Encoding: gzip`, parsed as
an `ExportMetricsServiceRequest` (a body that does not parse gets 400), and appended as one
JSON line ({"path", "headers", "request"}) to the file named by the first argument. The
answer is an `ExportMetricsServiceResponse`, with a partial success carrying the message of
`OTLP_TEST_PARTIAL` when that is set. Prints `PORT <n>` once listening on 127.0.0.1.
"""

import gzip
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

OUT = sys.argv[1]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = metrics_service_pb2.ExportMetricsServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as e:  # noqa: BLE001 - any parse failure is a bad request
            self.answer(400, str(e).encode())
            return
        with open(OUT, "a") as f:
            f.write(
                json.dumps(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "request": MessageToDict(request, preserving_proto_field_name=True),
                    }
                )
                + "\n"
            )
        response = metrics_service_pb2.ExportMetricsServiceResponse()
        partial = os.environ.get("OTLP_TEST_PARTIAL")
        if partial:
            response.partial_success.rejected_data_points = 3
            response.partial_success.error_message = partial
        self.answer(200, response.SerializeToString(), "application/x-protobuf")

    def answer(self, status, body, content_type="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
print("PORT", server.server_address[1], flush=True)
server.serve_forever()
