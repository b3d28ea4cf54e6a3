"""Minimal OpenAI-compatible HTTP test server (stdlib only): the Responses API (POST /v1/responses) and Chat Completions
(POST /v1/chat/completions), each answering as the API documents it (the pinned SDK's types parse both).

Background mode, as the Responses API documents it: a POST with background=true (and store=true) answers at once with
the response `queued` and its id; GET /v1/responses/{id} returns it, `in_progress` and then `completed` (its output and
usage) once KEPT_SECONDS have passed; POST /v1/responses/{id}/cancel cancels one still running. Every request is logged
(its method and path too), so a test counts the POSTs of each operation key. The behaviour of the POST decides the
response's course: "ok" (or "kept-slow:N": completed after N seconds), "kept-held" (in progress until the test makes
the file `<log>.release`), "kept-fail" (ends failed), "kept-lost" (the provider loses it: 404 thereafter). A call not
kept that behaves "held" is answered once that file is made: after whatever the test does while the call is out.

Stored chat completions, likewise: a POST /v1/chat/completions with store=true keeps the completion with its metadata,
and GET /v1/chat/completions?metadata[KEY]=VALUE lists those carrying it. "stored-hang" stores the completion and never
answers (the run is killed waiting); "stored-twice-hang" stores two (a broken promise); "hang" stores nothing."""

import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEPT_SECONDS = 0.3  # how long a background response of behaviour "ok" stays in progress
KEPT = ("kept-held", "kept-fail", "kept-lost", "stored-hang", "stored-twice-hang")  # behaviours only a kept call has
ERROR_CODES = {"400", "401", "403", "404", "422", "429", "500", "503"}
NOT_JSON_TEXT = "Sure! Here is my summary: it is fine."


def input_text(value):
    """Flatten a Responses-API `input` (string or message list) into plain text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    parts = []
    for item in value if isinstance(value, list) else [value]:
        content = item.get("content") if isinstance(item, dict) else item
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
        else:
            parts.append(json.dumps(item))
    return "\n".join(parts)


def ok_text(text, echo=""):
    """Build the deterministic JSON answer text for an "ok" request (`echo` appended to its summary)."""
    lines = text.split("\n")
    item_id = next((ln[len("Item: ") :].strip() for ln in lines if ln.startswith("Item: ")), None)
    if item_id is None or "<<<SOURCE" not in lines:
        return '{"note": "no item"}'
    start = lines.index("<<<SOURCE") + 1
    end = lines.index("SOURCE>>>", start) if "SOURCE>>>" in lines[start:] else len(lines)
    first = "\n".join(lines[start:end]).split("\n")[0][:160]
    citation = {"quote": first, "claim": "The source states this in its first line."}
    return json.dumps({"itemId": item_id, "summary": first + echo, "citations": [citation]})


def choose_behaviour(path, text, seq):
    """Pick the behaviour for this request from the behaviour file (default "ok")."""
    if not path:
        return "ok"
    try:
        with open(path, encoding="utf-8") as fh:
            spec = json.load(fh)
    except (OSError, ValueError):
        return "ok"
    if isinstance(spec, str):
        return spec
    default = spec.get("default", "ok")
    for needle, behaviour in (spec.get("by_input_contains") or {}).items():
        if needle in text:
            return behaviour
    sequence = spec.get("sequence") or []
    if sequence:
        return sequence[seq - 1] if seq - 1 < len(sequence) else default
    return default


def response_object(rid, body, text, out, incomplete=False):
    """Build a Response object the openai SDK can parse: completed, or incomplete with no output at all."""
    usage_in, usage_out = len(text) // 4, len(out) // 4
    message = {
        "type": "message",
        "id": "msg_" + rid,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": out, "annotations": []}],
    }
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if incomplete else "completed",
        "model": body.get("model"),
        "output": [] if incomplete else [message],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": usage_in,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage_out,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage_in + usage_out,
        },
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "metadata": {},
        "temperature": 1.0,
        "top_p": 1.0,
        "text": {"format": {"type": "text"}},
        "store": body.get("store"),
        "max_output_tokens": body.get("max_output_tokens"),
    }


RESPONSES, CHAT = "/v1/responses", "/v1/chat/completions"


def chat_parts(fields):
    """A Chat Completions request's system and user messages' text: (instructions, input)."""
    system, user = [], []
    for message in fields.get("messages") or []:
        if isinstance(message, dict):
            (system if message.get("role") in ("system", "developer") else user).append(input_text([message]))
    return "\n".join(system) or None, "\n".join(user)


def chat_completion_object(rid, body, text, out, incomplete=False):
    """Build a ChatCompletion the openai SDK can parse: stopped, or cut at the token limit (finish_reason length)."""
    usage_in, usage_out = len(text) // 4, len(out) // 4
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": ok_text(text)[:40] if incomplete else out, "refusal": None},
                "finish_reason": "length" if incomplete else "stop",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": usage_in, "completion_tokens": usage_out, "total_tokens": usage_in + usage_out},
        "system_fingerprint": None,
    }


class ProviderServer(ThreadingHTTPServer):
    """Threaded HTTP server carrying the log path, behaviour path and shared lock."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, addr, log_path, behaviour_path=None):
        super().__init__(addr, Handler)
        self.log_path = log_path
        self.behaviour_path = behaviour_path
        self.log_lock = threading.Lock()
        self.stopping = threading.Event()
        self.kept = {}  # background responses: id -> {"object", "behaviour", "doneAt"}
        self.stored = []  # stored chat completions: {"object", "metadata"}

    def handle_error(self, request, client_address):
        """A client that hung up mid-answer (a run that stopped on another item's refusal) is no error of the
        server's: say nothing (a test running the program in-process reads this process's stderr)."""
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class Handler(BaseHTTPRequestHandler):
    """Handles every request: log first, then answer according to the behaviour."""

    def log_message(self, format, *args):
        """Silence default per-request stderr logging."""

    def do_GET(self):
        """Any GET is unknown: log and 404."""
        self.handle_any()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def handle_any(self):
        """Parse, log and dispatch one request."""
        length = int(self.headers.get("Content-Length") or 0)
        received = self.rfile.read(length) if length else b""
        if len(received) < length:  # the client went away mid-body (a killed run): no whole request reached the provider,
            return  # which answers nothing and logs nothing (answering the headers alone once gave the crash fuzz garbage)
        path = self.path.split("?")[0]
        if path.startswith(RESPONSES + "/"):  # a background response: retrieve (GET) or cancel (POST …/cancel)
            return self.kept_response(path[len(RESPONSES) + 1 :])
        if path == CHAT and self.command == "GET":  # the stored chat completions, by metadata
            return self.stored_list()
        raw = received.decode("utf-8", "replace")
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw
        fields = body if isinstance(body, dict) else {}
        route = self.path.split("?")[0] if self.command == "POST" else None
        instructions, text = chat_parts(fields) if route == CHAT else (fields.get("instructions"), input_text(fields.get("input")))
        client_id = self.headers.get("X-Client-Request-Id")
        known = route in (RESPONSES, CHAT)
        srv = self.server
        with srv.log_lock:
            seq = self.count_log_lines() + 1
            behaviour = choose_behaviour(srv.behaviour_path, text, seq) if known else "not-found"
            if behaviour.startswith("limit:"):  # "limit:30": a provider's own rate limit, 30 answers in any sliding 60 s
                behaviour = "429-retry:1" if self.answered_since(time.time() - 60) >= int(behaviour.split(":", 1)[1]) else "ok"
            # "drop" and "hang" produce (and log) an answer that is never delivered, as a real
            # provider may: the log then holds what a person reconciles with.
            answers = known and (
                behaviour
                in (
                    "ok",
                    *KEPT,
                    "not-json",
                    "incomplete",
                    "drop",
                    "hang",
                    "echo-key-ids",
                    "echo-key-output",
                    "trickle",
                    "echo-key-escaped",
                    "echo-key-split",
                    "held",
                )
                or behaviour.startswith(("slow:", "answer:"))
            )
            rid = out = None
            if answers:
                digest = hashlib.sha256((client_id or raw).encode("utf-8")).hexdigest()[:24]
                rid = f"{'chatcmpl-' if route == CHAT else 'resp_'}{digest}_{seq}"
                if behaviour == "echo-key-ids":  # a careless server: the caller's key inside its ids
                    rid = "resp-" + self.headers.get("Authorization", "").removeprefix("Bearer ")
                out = (
                    {"not-json": NOT_JSON_TEXT, "incomplete": ""}.get(behaviour)
                    if behaviour in ("not-json", "incomplete")
                    else ok_text(text)
                )
                if behaviour.startswith("answer:"):  # a scripted answer: this JSON text, whatever was asked
                    out = behaviour[len("answer:") :]
                if behaviour == "echo-key-output":  # a model repeating what it was sent: the caller's key in a valid proposal
                    out = ok_text(text, " (sent with " + self.headers.get("Authorization", "").removeprefix("Bearer ") + ")")
                if behaviour in (
                    "echo-key-escaped",
                    "echo-key-split",
                ):  # the same key, spelled with JSON escapes (all, or every other character)
                    key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                    step = 1 if behaviour == "echo-key-escaped" else 2
                    spelled = "".join(f"\\u{ord(c):04x}" if n % step == 0 else c for n, c in enumerate(key))
                    out = ok_text(text, " (sent with KEY-HERE)").replace("KEY-HERE", spelled)
            self.write_log(
                {
                    "seq": seq,
                    "method": self.command,
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body,
                    "api": "chat" if route == CHAT else "responses",
                    "model": fields.get("model"),
                    "instructions": instructions,
                    "input": text if route == CHAT else fields.get("input"),
                    "store": fields.get("store"),
                    "background": fields.get("background"),
                    "metadata": fields.get("metadata"),
                    "max_output_tokens": fields.get("max_output_tokens"),
                    "max_completion_tokens": fields.get("max_completion_tokens"),
                    "max_tokens": fields.get("max_tokens"),
                    "response_format": fields.get("response_format"),
                    "tools": fields.get("tools"),
                    "client_request_id": client_id,
                    "behaviour": behaviour,
                    "response_id": rid,
                    "output_text": out,
                    "time": time.time(),
                }
            )
        self.dispatch(behaviour, seq, rid, fields, text, out, chat_completion_object if route == CHAT else response_object)

    def answered_since(self, since):
        """How many requests this server answered (behaviour ok) since `since`, from its own log (under its lock)."""
        if not os.path.exists(self.server.log_path):
            return 0
        with open(self.server.log_path, encoding="utf-8") as fh:
            records = [json.loads(line) for line in fh if line.strip()]
        return sum(1 for r in records if r.get("behaviour") == "ok" and r.get("time", 0) > since)

    def count_log_lines(self):
        """Number of lines already in the log (so restarts continue the sequence)."""
        try:
            with open(self.server.log_path, "rb") as fh:
                return sum(1 for line in fh if line.strip())
        except FileNotFoundError:
            return 0

    def write_log(self, record):
        """Append one JSON line to the log and fsync it (caller holds the lock)."""
        with open(self.server.log_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def dispatch(self, behaviour, seq, rid, fields, text, out, answer=response_object):
        """Answer (or refuse to answer) according to the behaviour; `answer` builds the API's answer object."""
        if behaviour == "not-found":
            return self.send_error_json(404, seq, f"test server: no route {self.command} {self.path}")
        if behaviour == "drop":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.connection.close()
            return None
        if behaviour == "hang":
            self.server.stopping.wait(120)
            self.close_connection = True
            return None
        if route_of(self) == CHAT and fields.get("store") is True and out is not None:
            with self.server.log_lock:
                for n in range(2 if behaviour == "stored-twice-hang" else 1):
                    stored = answer(rid if n == 0 else f"{rid}_again", fields, text, out)
                    self.server.stored.append({"object": stored, "metadata": fields.get("metadata") or {}})
            if behaviour.startswith("stored-"):  # kept, and never answered: the run is killed waiting
                self.server.stopping.wait(120)
                self.close_connection = True
                return None
        if route_of(self) == RESPONSES and fields.get("background") is True and out is not None:
            return self.start_kept(behaviour, seq, rid, fields, text, out)
        if behaviour.startswith("slow:"):
            time.sleep(float(behaviour.split(":", 1)[1]))
        if behaviour == "held":  # answered once the test makes the file `<log>.release`: after what it does meanwhile
            while not os.path.exists(self.server.log_path + ".release") and not self.server.stopping.wait(0.01):
                pass
        if behaviour in ERROR_CODES:
            return self.send_error_json(int(behaviour), seq, f"test server error {behaviour}")
        if behaviour == "429-quota":  # the account's quota is exhausted: a refusal, never a wait
            return self.send_error_json(429, seq, "You exceeded your current quota.", code="insufficient_quota")
        if behaviour.startswith(("429-retry", "503-retry")):  # "429-retry:2", "429-retry-ms:1500", "429-retry-reset:1s", ...
            name, value = behaviour.split(":", 1)
            header = {"retry": "Retry-After", "retry-ms": "retry-after-ms", "retry-reset": "x-ratelimit-reset-requests"}[name[4:]]
            return self.send_error_json(
                int(name[:3]), seq, "Rate limit reached for requests", code="rate_limit_exceeded", headers={header: value}
            )
        if behaviour == "echo-key-400":
            auth = self.headers.get("Authorization", "")
            return self.send_error_json(400, seq, f"test server error 400: bad key {auth}")
        if behaviour == "trickle":  # headers at once, then the body one byte a second: every wait is short
            data = json.dumps(answer(rid, fields, text, out)).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for n in range(len(data)):
                if self.server.stopping.wait(1.0):
                    break
                try:
                    self.wfile.write(data[n : n + 1])
                    self.wfile.flush()
                except OSError:
                    break
            self.close_connection = True
            return None
        if behaviour == "redirect":  # elsewhere on the same server: a client that follows it sends the call twice
            self.send_response(307)
            self.send_header("Location", "/v1/responses-elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if out is None:
            return self.send_error_json(500, seq, f"test server: unknown behaviour {behaviour!r}")
        request_id = "req-" + self.headers.get("Authorization", "").removeprefix("Bearer ") if behaviour == "echo-key-ids" else None
        return self.send_json(200, seq, answer(rid, fields, text, out, incomplete=behaviour == "incomplete"), request_id)

    def start_kept(self, behaviour, seq, rid, fields, text, out):
        """A background request: its response kept, answered at once `queued` (no output, no usage yet)."""
        done = response_object(rid, fields, text, out, incomplete=behaviour == "incomplete")
        done.update(background=True, metadata=fields.get("metadata") or {})
        seconds = float(behaviour.split(":", 1)[1]) if behaviour.startswith("kept-slow:") else KEPT_SECONDS
        with self.server.log_lock:
            self.server.kept[rid] = {"object": done, "behaviour": behaviour, "doneAt": time.time() + seconds}
        return self.send_json(200, seq, {**done, "status": "queued", "output": [], "usage": None})

    def kept_response(self, rest):
        """GET /v1/responses/{id} (its state now) or POST /v1/responses/{id}/cancel, logged as every request is."""
        rid, _, action = rest.partition("/")
        srv = self.server
        with srv.log_lock:
            seq = self.count_log_lines() + 1
            kept = srv.kept.get(rid)
            self.write_log({"seq": seq, "method": self.command, "path": self.path, "response_id": rid, "time": time.time()})
            if kept is None or kept["behaviour"] == "kept-lost" or (self.command, action) not in (("GET", ""), ("POST", "cancel")):
                state = None
            else:
                state = self.kept_state(kept, cancel=action == "cancel")
        if state is None:
            return self.send_error_json(404, seq, f"No response found with id '{rid}'.", code=None)
        return self.send_json(200, seq, state)

    def stored_list(self):
        """GET /v1/chat/completions?metadata[KEY]=VALUE…: the stored completions carrying every pair, as a cursor page."""
        from urllib.parse import parse_qsl, urlsplit

        pairs = {k[len("metadata[") : -1]: v for k, v in parse_qsl(urlsplit(self.path).query) if k.startswith("metadata[")}
        srv = self.server
        with srv.log_lock:
            seq = self.count_log_lines() + 1
            self.write_log({"seq": seq, "method": "GET", "path": self.path, "metadata": pairs, "time": time.time()})
            found = [s["object"] for s in srv.stored if all(s["metadata"].get(k) == v for k, v in pairs.items())]
        page = {"object": "list", "data": found, "has_more": False}
        page.update(first_id=found[0]["id"] if found else None, last_id=found[-1]["id"] if found else None)
        return self.send_json(200, seq, page)

    def kept_state(self, kept, cancel=False):
        """A kept response as it stands now (the caller holds the lock): in progress, or ended as its behaviour says."""
        done = kept["object"]
        if kept.get("ended"):
            return kept["ended"]
        running = kept["behaviour"] == "kept-held" and not os.path.exists(self.server.log_path + ".release")
        running = running or time.time() < kept["doneAt"]
        if cancel and running:
            kept["ended"] = {**done, "status": "cancelled", "output": [], "usage": None}
        elif not running and kept["behaviour"] == "kept-fail":
            error = {"code": "server_error", "message": "The model failed to generate a response."}
            kept["ended"] = {**done, "status": "failed", "output": [], "usage": None, "error": error}
        elif not running:
            kept["ended"] = done
        return kept.get("ended") or {**done, "status": "in_progress", "output": [], "usage": None}

    def send_json(self, status, seq, payload, request_id=None, headers=None):
        """Send a JSON payload with content-type and x-request-id headers (and `headers`)."""
        data = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", request_id or f"req_{seq}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status, seq, message, code=None, headers=None):
        """Send an OpenAI-style error body (its code the status unless given), with `headers`."""
        error = {"message": message, "type": "test_error", "param": None, "code": code or str(status)}
        self.send_json(status, seq, {"error": error}, headers=headers)


def route_of(handler):
    """The API a POST names (its path without a query), None for any other request."""
    return handler.path.split("?")[0] if handler.command == "POST" else None


def start_server(log_path, behaviour_path=None, port=0):
    """Start the server in a daemon thread; return (base_url, server)."""
    server = ProviderServer(("127.0.0.1", port), log_path, behaviour_path)
    # a short poll interval lets stop_server return at once instead of after up to 0.5 s per test
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/v1", server


def stop_server(server):
    """Stop a server started with start_server, releasing hung handlers."""
    server.stopping.set()
    server.shutdown()
    server.server_close()


def main(argv=None):
    """Command-line entry point: print READY line and serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--log", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--behaviour-file", default=None)
    args = parser.parse_args(argv)
    server = ProviderServer(("127.0.0.1", args.port), args.log, args.behaviour_file)
    print(f"READY http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
