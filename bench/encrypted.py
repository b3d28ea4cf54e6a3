"""`make bench`, encrypted at rest (issue 36): a whole fake job, encrypted at rest against the same job not encrypted, same run.

A whole job is what a person runs, each command its own process as at a terminal: `start` (three items, to the review),
`inspect`, `decide`, then `verify`, in a new state directory each time. Encrypted: DURABLE_JOB_KEY_FILE names a
key-encryption key, so the job's data key is made and wrapped, and every content value, checkpoint and the receipt
is written and read as AES-GCM ciphertext. The two kinds run interleaved (ROUNDS each, after one warm-up of each)
and the medians are compared. Target: encrypted <= 1.15x not encrypted. BENCH_ENCRYPTED_ROUNDS sets the rounds (default 7).
"""

import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(os.path.dirname(HERE), "durable_job.py")
ROUNDS = int(os.environ.get("BENCH_ENCRYPTED_ROUNDS", "7"))
TARGET = 1.15
SOURCES = {
    "alpha": "The new boiler saves roughly 8 percent of gas a year.\nIt is serviced on Saturday at 07:00 for $1,200.\n",
    "beta": "STRUCTURAL FIXTURE ONLY: Beta report has one unresolved field.\nThe report is synthetic test input.\n",
    "gamma": "STRUCTURAL FIXTURE ONLY: Gamma report lists three open questions.\nThe report is synthetic test input.\n",
}


def workspace(root: str) -> str:
    """Three sources and a fake-mode manifest over them, as a person lays them out; the manifest's path."""
    items = []
    for item_id, text in SOURCES.items():
        with open(os.path.join(root, f"{item_id}.txt"), "w") as fh:
            fh.write(text)
        items.append({"id": item_id, "path": f"{item_id}.txt", "sha256": hashlib.sha256(text.encode()).hexdigest()})
    manifest = {
        "schemaVersion": 1,
        "jobId": "bench-encrypted",
        "approved": True,
        "approvedBy": "owner@example.test",
        "mode": "fake",
        "model": "fake-structural-1",
        "providerTransferApproved": False,
        "maxModelCalls": 6,
        "maxAttemptsPerItem": 2,
        "items": items,
    }
    path = os.path.join(root, "manifest.json")
    with open(path, "w") as fh:
        json.dump(manifest, fh)
    return path


def run(env: dict, *argv: str) -> dict:
    done = subprocess.run([sys.executable, PROGRAM, *argv, "--json"], capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"{argv[0]} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def whole_job(root: str, key: str | None) -> float:
    """Seconds for start, inspect, decide and verify of one new job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DURABLE_JOB_", "OPENAI_"))}
    if key:
        env["DURABLE_JOB_KEY_FILE"] = key
    manifest = workspace(root)
    state = ["--state-dir", os.path.join(root, "state")]
    began = time.perf_counter()
    digest = run(env, "start", "--manifest", manifest, *state)["interrupt"][0]["resultsSha256"]
    run(env, "inspect", *state)
    run(env, "decide", *state, "--decision", "accept", "--reviewer", "bench", "--reason", "measured", "--results-sha256", digest)
    if not run(env, "verify", *state)["ok"]:
        raise SystemExit("verify failed")
    return time.perf_counter() - began


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-encrypted-") as top:
        key = os.path.join(top, "kek")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
            fh.write(os.urandom(32))
        times: dict[str, list] = {"plain": [], "encrypted": []}
        for n in range(ROUNDS + 1):
            for kind in ("plain", "encrypted") if n % 2 else ("encrypted", "plain"):
                root = os.path.join(top, f"{kind}-{n}")
                os.makedirs(root)
                seconds = whole_job(root, key if kind == "encrypted" else None)
                if n:  # the first round warms the disk cache and the interpreter's bytecode
                    times[kind].append(seconds)
        plain, encrypted = statistics.median(times["plain"]), statistics.median(times["encrypted"])
        ratio = encrypted / plain
        print("encrypted at rest: a whole fake job (start of 3 items, inspect, decide, verify; each its own process), same run")
        print(f"  not encrypted  median {plain * 1000:7.0f} ms over {ROUNDS} jobs")
        print(f"  encrypted      median {encrypted * 1000:7.0f} ms over {ROUNDS} jobs")
        print(f"  ratio {ratio:.3f}x (target <= {TARGET}x): {'ok' if ratio <= TARGET else 'OVER'}")
        return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
