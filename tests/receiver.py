"""A loopback webhook receiver for the notification tests: a real HTTP server in a thread that records every POST
(its delivery id, event, body, its signature header and whether it holds, by the check docs/CONTRACT.md shows) before it
answers; it can be slow (to let a test kill the sender while a delivery is in flight), can be down (not listening yet,
or stopped), and can answer with a redirect elsewhere instead of taking the event."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import threading
import time

TOLERANCE = 300  # seconds: a signature older (or newer) than this is a replay


def verified(header: str, body: bytes, secret: bytes, now: float | None = None, tolerance: int = TOLERANCE) -> bool:
    """A receiver's check of X-Durable-Job-Signature (`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>`), as
    docs/CONTRACT.md shows it: the HMAC holds and t is within the tolerance of the receiver's clock."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    t, v1 = fields.get("t", ""), fields.get("v1", "")
    if not t.isdigit() or abs((time.time() if now is None else now) - int(t)) > tolerance:
        return False
    expected = hmac.new(secret, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(v1, expected)


class Receiver:
    def __init__(self, port: int, secret: bytes):
        self.port, self.secret = port, secret
        self.got: list = []
        self.delay = 0.0  # seconds each answer waits, after the delivery is recorded
        self.redirect: tuple | None = None  # (status, location): answer each POST with this redirect
        self.server: http.server.ThreadingHTTPServer | None = None
        self.lock = threading.Lock()

    def start(self) -> Receiver:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # what a sender that followed a redirect would send
                self.do_POST()

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                header = self.headers.get("X-Durable-Job-Signature") or ""
                with receiver.lock:
                    receiver.got.append(
                        {
                            "id": self.headers.get("X-Durable-Job-Delivery"),
                            "event": self.headers.get("X-Durable-Job-Event"),
                            "signature": header,
                            "signed": verified(header, body, receiver.secret),
                            "method": self.command,
                            "path": self.path,
                            "body": body.decode("utf-8"),
                            "json": json.loads(body) if body else None,
                        }
                    )
                time.sleep(receiver.delay)
                if receiver.redirect is not None:
                    self.send_response(receiver.redirect[0])
                    self.send_header("Location", receiver.redirect[1])
                    self.send_header("Content-Length", "0")
                else:
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
