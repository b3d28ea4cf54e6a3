"""The 3-item openai-mode job two benchmarks share (bench/bench.py's latency figures, bench/floor.py's peers)."""

from __future__ import annotations

import hashlib
import json
import os

SOURCES = {
    "alpha": "STRUCTURAL FIXTURE ONLY: Alpha report requires owner review before any decision.\n"
    "The report is synthetic test input and describes no real event.\n",
    "beta": "STRUCTURAL FIXTURE ONLY: Beta report has one unresolved field.\n"
    "The report is synthetic test input and describes no real event.\n",
    "gamma": "STRUCTURAL FIXTURE ONLY: Gamma report lists three open questions.\n"
    "The report is synthetic test input and describes no real event.\n",
}


def write_manifest(folder: str, name: str, job_id: str, concurrency: int = 1) -> str:
    """The three sources in folder, and a manifest over them (mode openai, model gpt-bench); its path."""
    os.makedirs(folder, exist_ok=True)
    items = []
    for item_id, text in SOURCES.items():
        data = text.encode("utf-8")
        with open(os.path.join(folder, f"{item_id}.txt"), "wb") as fh:
            fh.write(data)
        items.append({"id": item_id, "path": f"{item_id}.txt", "sha256": hashlib.sha256(data).hexdigest()})
    manifest = {
        "schemaVersion": 1,
        "jobId": job_id,
        "approved": True,
        "approvedBy": "bench@example.test",
        "mode": "openai",
        "model": "gpt-bench",
        "providerTransferApproved": True,
        "maxModelCalls": 6,
        "maxAttemptsPerItem": 2,
        "maxConcurrentCalls": concurrency,
        "items": items,
    }
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2)
        fh.write("\n")
    return path
