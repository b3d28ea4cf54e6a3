"""bench/floor.py's contender "bare LangGraph": a 3-node graph, one Responses call a node, and a checkpointer.

    python bench/floor_langgraph.py --kind sqlite   --bodies BODIES.json --root DIR
    python bench/floor_langgraph.py --kind postgres --bodies BODIES.json --store URL

Each node sends one of the request bodies this program sent (BODIES.json, captured from the loopback server's log)
with the pinned openai SDK (one client for the process, retries off) and adds the answer's text to the state.
`sqlite`: SqliteSaver on a new file each job (its set-up included: the saver creates its tables on first use);
`postgres`: PostgresSaver on one connection for the process, set up once (untimed), each job its own thread.
No journal, no review: what a graph with a checkpointer costs and nothing more.
"""

from __future__ import annotations

import argparse
import operator
import os
import sqlite3
import sys
from importlib.metadata import version
from typing import Annotated, TypedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import openai
from floor_child import answers_problem, load_bodies, serve
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    outputs: Annotated[list, operator.add]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=("sqlite", "postgres"), required=True)
    parser.add_argument("--bodies", required=True)
    parser.add_argument("--root", help="a folder for the SQLite files (--kind sqlite)")
    parser.add_argument("--store", help="the PostgreSQL URL (--kind postgres)")
    args = parser.parse_args()
    bodies, item_ids = load_bodies(args.bodies)
    client = openai.OpenAI(max_retries=0, timeout=30)

    def node(body: dict):
        def call(state: State) -> dict:
            return {"outputs": [client.responses.create(**body).output_text]}

        return call

    builder = StateGraph(State)
    previous = START
    for n, body in enumerate(bodies):
        builder.add_node(f"item{n}", node(body))
        builder.add_edge(previous, f"item{n}")
        previous = f"item{n}"
    builder.add_edge(previous, END)

    if args.kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        os.makedirs(args.root, exist_ok=True)

        def run(n: int) -> dict:
            conn = sqlite3.connect(os.path.join(args.root, f"job-{n}.sqlite"), check_same_thread=False)
            try:
                graph = builder.compile(checkpointer=SqliteSaver(conn))
                return graph.invoke({"outputs": []}, {"configurable": {"thread_id": f"job-{n}"}})
            finally:
                conn.close()

        saver_version = version("langgraph-checkpoint-sqlite")
    else:
        from langgraph.checkpoint.postgres import PostgresSaver

        saver_cm = PostgresSaver.from_conn_string(args.store)
        saver = saver_cm.__enter__()  # open for the process's life (the child exits with os._exit)
        saver.setup()
        graph = builder.compile(checkpointer=saver)

        def run(n: int) -> dict:
            return graph.invoke({"outputs": []}, {"configurable": {"thread_id": f"floor-{os.getpid()}-{n}"}})

        saver_version = version("langgraph-checkpoint-postgres")

    serve(
        lambda n: n,
        run,
        lambda out: answers_problem(out["outputs"], item_ids),
        {"version": f"langgraph {version('langgraph')}, saver {saver_version}, openai {openai.__version__}"},
    )


if __name__ == "__main__":
    main()
