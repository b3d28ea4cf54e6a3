"""bench/floor.py's contender "DBOS Transact": a workflow of three steps, one Responses call each, then an event.

    PEERS_VENV/bin/python bench/floor_dbos.py --bodies BODIES.json --system-database sqlite:////abs/path.sqlite
    PEERS_VENV/bin/python bench/floor_dbos.py --bodies BODIES.json --system-database postgresql://role@host:port/db

Runs in its own throwaway environment (bench/floor.py installs DBOS 3.4.x and the openai SDK pinned as
requirements.txt pins it there); this project does not depend on DBOS. `DBOS.launch()` once for the process
(untimed: it creates or migrates the system database); a job is `@DBOS.workflow()` calling a `@DBOS.step()` three
times, each step one `client.responses.create(...)` with a request body this program sent, then
`DBOS.set_event("review", ...)` where a person would take over. Each job has its own workflow ID.

Note what a DBOS step promises: it commits after its call returns, so a crash during a call sends it again; this
program's pending row before each request is a guarantee DBOS does not give.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import version

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import openai
from dbos import DBOS, SetWorkflowID
from floor_child import answers_problem, load_bodies, serve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bodies", required=True)
    parser.add_argument("--system-database", required=True, help="sqlite:////abs/path or postgresql://...")
    args = parser.parse_args()
    bodies, item_ids = load_bodies(args.bodies)
    client = openai.OpenAI(max_retries=0, timeout=30)

    DBOS(config={"name": "floor", "system_database_url": args.system_database, "log_level": "WARNING"})

    @DBOS.step()
    def call(n: int) -> str:
        return client.responses.create(**bodies[n]).output_text

    @DBOS.workflow()
    def job() -> list:
        outputs = [call(n) for n in range(len(bodies))]
        DBOS.set_event("review", {"outputs": outputs})
        return outputs

    DBOS.launch()
    tag = os.getpid()

    def run(n: int) -> list:
        with SetWorkflowID(f"floor-{tag}-{n}"):
            return job()

    serve(
        lambda n: n,
        run,
        lambda outputs: answers_problem(outputs, item_ids),
        {"version": f"dbos {version('dbos')}, openai {openai.__version__}"},
    )


if __name__ == "__main__":
    main()
