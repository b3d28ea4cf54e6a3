"""A small read-only MCP test server (mcp 2.x MCPServer, stdio) with fixture resources and a request log.

Run as: python tests/mcp_server.py --log LOG [--alpha-file FILE] [--slow-seconds S]

Resources:
  docs://alpha  text: the contents of --alpha-file, read afresh on every request (so a test can
                change it between start and resume), or the ALPHA fixture text when no file is given
  docs://beta   text: the BETA fixture text
  docs://big    text: 3,001 bytes, one over the source bound
  docs://blob   binary (a blob resource): must be refused as "not text"
  docs://slow   text, but only after sleeping --slow-seconds (default 600): longer than any short timeout
  docs://env-file   text: the file named by the DOCS_PATH environment variable (as servers that take
                    their data folder from the environment do); an error when DOCS_PATH is unset, and
                    one that echoes DOCS_PATH's value when the file cannot be read
  docs://env-names  text: the sorted names (never the values) of every variable in the server's environment
  docs://key-visible  text: whether OPENAI_API_KEY is in the server's environment
Tool:
  delete_everything   must never be called; calling it writes a marker beside the log

Every JSON-RPC message the server receives (requests, notifications, responses) is appended to
the log as one JSON line {"method": ..., "id": ..., "params": ...} *before* the SDK handles it,
by reading stdin ourselves and handing the lines to the SDK's stdio transport.
The server also prints a line on stderr at start-up, so a test can prove the client hides it.
"""

import argparse
import io
import json
import os
import sys
import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

ALPHA = (
    "STRUCTURAL FIXTURE ONLY: Alpha report requires owner review before any decision.\n"
    "The report is synthetic test input and describes no real event.\n"
)
BETA = "STRUCTURAL FIXTURE ONLY: Beta report has one unresolved field.\nThe report is synthetic test input and describes no real event.\n"
BIG = "x" * 3000 + "\n"
BLOB = b"\x89PNG\r\n\x1a\n\x00\x01binary"
STDERR_NOISE = "mcp_server.py: STDERR NOISE that must never reach the CLI's output"


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--log", required=True, help="append one JSON line per received JSON-RPC message")
    p.add_argument("--alpha-file", help="UTF-8 file whose text docs://alpha serves (re-read per request)")
    p.add_argument("--slow-seconds", type=float, default=600.0)
    return p.parse_args(argv)


def log_line(path: str, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def build(args) -> MCPServer:
    app = MCPServer("durable-job-test-docs")

    @app.resource("docs://alpha", mime_type="text/plain")
    def alpha() -> str:
        if args.alpha_file:
            with open(args.alpha_file, encoding="utf-8") as fh:
                return fh.read()
        return ALPHA

    @app.resource("docs://beta", mime_type="text/plain")
    def beta() -> str:
        return BETA

    @app.resource("docs://big", mime_type="text/plain")
    def big() -> str:
        return BIG

    @app.resource("docs://blob", mime_type="application/octet-stream")
    def blob() -> bytes:
        return BLOB

    @app.resource("docs://slow", mime_type="text/plain")
    async def slow() -> str:
        await anyio.sleep(args.slow_seconds)
        return ALPHA

    @app.resource("docs://env-file", mime_type="text/plain")
    def env_file() -> str:
        path = os.environ.get("DOCS_PATH")
        if not path:
            raise ValueError("DOCS_PATH is not set: this server reads its document from the file it names")
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except OSError as exc:  # echoes the setting in its error, as careless servers do
            raise MCPError(-32001, f"cannot read DOCS_PATH={path}: {exc.strerror}") from None

    @app.resource("docs://env-names", mime_type="text/plain")
    def env_names() -> str:
        return "Environment variable names this MCP server sees: " + " ".join(sorted(os.environ)) + "\n"

    @app.resource("docs://key-visible", mime_type="text/plain")
    def key_visible() -> str:
        return f"OPENAI_API_KEY visible to this MCP server: {'yes' if 'OPENAI_API_KEY' in os.environ else 'no'}\n"

    @app.tool()
    def delete_everything(confirm: bool = False) -> str:
        """Destroys every document. A read-only client must never call this."""
        log_line(args.log + ".TOOL-CALLED", {"tool": "delete_everything", "confirm": confirm})
        return "deleted everything"

    return app


class LoggingStdin:
    """An async line iterator over the real stdin that logs each JSON-RPC message before the SDK parses it."""

    def __init__(self, log: str):
        self.log = log
        self.file = anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        line = await self.file.readline()
        if not line:
            raise StopAsyncIteration
        try:
            msg = json.loads(line)
            record = {
                "method": msg.get("method", "<response>" if "result" in msg or "error" in msg else "<unknown>"),
                "id": msg.get("id"),
                "params": msg.get("params"),
            }
        except ValueError:
            record = {"method": "<unparseable>", "raw": line[:200]}
        log_line(self.log, record)
        return line


async def serve(args) -> None:
    app = build(args)
    server = app._lowlevel_server  # MCPServer.run_stdio_async does exactly this, minus our stdin
    async with stdio_server(stdin=LoggingStdin(args.log)) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main(argv=None) -> None:
    args = parse_args(argv)
    print(STDERR_NOISE, file=sys.stderr, flush=True)
    log_line(args.log, {"method": "<server-started>", "pid": os.getpid(), "time": time.time()})
    anyio.run(serve, args)


if __name__ == "__main__":
    main()
