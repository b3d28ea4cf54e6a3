"""A loopback webhook receiver for the notification tests: a real HTTP server in a thread that records every POST
(its delivery id, event, body and whether its HMAC signature holds) before it answers; it can be slow (to let a test
kill the sender while a delivery is in flight) and can be down (not listening yet, or stopped)."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time


class Receiver:
    def __init__(self, port: int, secret: bytes):
        self.port, self.secret = port, secret
        self.got: list = []
        self.delay = 0.0  # seconds each answer waits, after the delivery is recorded
        self.server: http.server.ThreadingHTTPServer | None = None
        self.lock = threading.Lock()

    def start(self) -> Receiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                expected = "sha256=" + hmac.new(receiver.secret, body, hashlib.sha256).hexdigest()
                with receiver.lock:
                    receiver.got.append(
                        {
                            "id": self.headers.get("X-Durable-Job-Delivery"),
                            "event": self.headers.get("X-Durable-Job-Event"),
                            "signed": hmac.compare_digest(self.headers.get("X-Durable-Job-Signature") or "", expected),
                            "body": body.decode("utf-8"),
                            "json": json.loads(body),
                        }
                    )
                time.sleep(receiver.delay)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def ids(self) -> list:
        with self.lock:
            return [g["id"] for g in self.got]
