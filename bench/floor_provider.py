"""The loopback provider for bench/floor.py: tests/provider_server.py's server, its answers unchanged, its log cheaper.

    python bench/floor_provider.py --log FILE       # prints "READY http://127.0.0.1:PORT/v1", serves until killed

The test server appends each request to its log with an fsync and counts the log's lines again for every request,
so an answer would cost more the longer the bench runs (and more with the disk's mood). Here the count is kept in
memory and the line is written without an fsync: every answer costs the same all run long, for every contender.
The log still holds every request body (the parent reads this program's bodies from it for the peers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import provider_server as ps


class FloorHandler(ps.Handler):
    def count_log_lines(self):
        """The requests logged so far (the caller holds the server's lock)."""
        return self.server.logged

    def write_log(self, record):
        """Append one JSON line, no fsync (the caller holds the lock)."""
        self.server.log_file.write(json.dumps(record) + "\n")
        self.server.log_file.flush()
        self.server.logged += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    server = ps.ProviderServer(("127.0.0.1", 0), args.log)
    server.RequestHandlerClass = FloorHandler
    server.logged = 0
    server.log_file = open(args.log, "a", encoding="utf-8")
    print(f"READY http://127.0.0.1:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
