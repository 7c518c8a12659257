#!/usr/bin/env python3
"""A tiny OpenAI-compatible streaming stub (stdlib only) for load and memory scripts.

POST */chat/completions answers a stream of N content chunks, GAP seconds apart, then usage and
[DONE]. Not a timing ground truth (Python's scheduling jitter is ~1 ms); the replay server in
tests/common is. Usage: sse_stub.py PORT [N=16] [GAP=0.01]
"""
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 0
N = int(sys.argv[2]) if len(sys.argv) > 2 else 16
GAP = float(sys.argv[3]) if len(sys.argv) > 3 else 0.01


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

        def send(obj):
            data = obj if isinstance(obj, str) else json.dumps(obj)
            self.wfile.write(f"data: {data}\n\n".encode())
            self.wfile.flush()

        send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
        for i in range(N):
            time.sleep(GAP)
            send({"choices": [{"index": 0, "delta": {"content": f" t{i}"}}]})
        send({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        send({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": N}})
        send("[DONE]")
        self.close_connection = True


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print(f"SSE_STUB_URL=http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
server.serve_forever()
