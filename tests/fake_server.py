"""A tiny HTTP server answering canned JSON per path: a stand-in for llama-server or vLLM in the rollout tests."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    """A tiny HTTP server answering canned JSON per path (a stand-in for llama-server or vLLM)."""

    def __init__(self, routes):
        routes_ = routes

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                path = self.path.split("?")[0]
                if path not in routes_:
                    self.send_response(404)
                    self.end_headers()
                    return
                status, body = routes_[path]
                if callable(body):
                    length = int(self.headers.get("Content-Length") or 0)
                    body = body(json.loads(self.rfile.read(length) or b"null"))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
