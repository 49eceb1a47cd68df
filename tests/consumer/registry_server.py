"""A small stand-in for Confluent Schema Registry, for the tests (no registry server is packaged with sluice).

It implements the endpoints the worker and sluice-submit use, with the request and answer formats Confluent
documents (content type application/vnd.schemaregistry.v1+json):

  GET  /schemas/ids/{id}             200 {"schema": "<schema as a JSON string>"}
                                     404 {"error_code": 40403, "message": "Schema not found"}
  POST /subjects/{subject}/versions  body {"schema": "..."}: 200 {"id": N}; the same schema gets the same id
                                     (in any subject); not a valid Avro schema: 422 {"error_code": 42201, ...}
  GET  /subjects                     200 ["subject", ...]

Schema ids are global and start at --first-id (Confluent's start at 1). Every request is logged as one
line "METHOD PATH STATUS" on stdout, so a test can count fetches.

  /usr/bin/python3 registry_server.py [--first-id N]   (prints "port=P" once it listens on 127.0.0.1:P)
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import avro.schema

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class Registry:
    def __init__(self, first_id):
        self.next_id = first_id
        self.by_id = {}        # id -> schema text as registered
        self.ids = {}          # canonical schema -> id
        self.subjects = {}     # subject -> [ids in version order]

    def register(self, subject, text):
        canonical = json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
        sid = self.ids.get(canonical)
        if sid is None:
            sid = self.ids[canonical] = self.next_id
            self.next_id += 1
            self.by_id[sid] = text
        versions = self.subjects.setdefault(subject, [])
        if sid not in versions:
            versions.append(sid)
        return sid


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    registry = None

    def answer(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        print("%s %s %d" % (self.command, self.path, status), flush=True)

    def error(self, status, code, message):
        self.answer(status, {"error_code": code, "message": message})

    def do_GET(self):
        parts = self.path.strip("/").split("/")
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
            text = self.registry.by_id.get(int(parts[2]))
            if text is None:
                return self.error(404, 40403, "Schema not found")
            return self.answer(200, {"schema": text})
        if parts == ["subjects"]:
            return self.answer(200, sorted(self.registry.subjects))
        self.error(404, 404, "HTTP 404 Not Found")

    def do_POST(self):
        parts = self.path.strip("/").split("/")
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if len(parts) != 3 or parts[0] != "subjects" or parts[2] != "versions":
            return self.error(404, 404, "HTTP 404 Not Found")
        try:
            text = json.loads(body)["schema"]
            avro.schema.parse(text)
        except Exception as e:
            return self.error(422, 42201, "Invalid schema: %s" % e)
        self.answer(200, {"id": self.registry.register(unquote(parts[1]), text)})

    def log_message(self, *a):
        pass   # one line per request is printed by answer()


def main():
    first_id = 1
    if "--first-id" in sys.argv:
        first_id = int(sys.argv[sys.argv.index("--first-id") + 1])
    Handler.registry = Registry(first_id)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("port=%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
