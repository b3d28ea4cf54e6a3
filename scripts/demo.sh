#!/bin/sh
# The built-in structural job, end to end, in a fresh temporary state directory.
# It runs the program both ways, `python durable_job.py` and the installed
# `durable-job` command: the seal is of the module's bytes, so either continues the other's job.
set -eu
BIN=${1:-.venv/bin}
PY="$BIN/python"
DJ="$BIN/durable-job"
STATE=$(mktemp -d "${TMPDIR:-/tmp}/durable_job_demo.XXXXXX")/state
step() { printf '\n== %s\n' "$*"; }
step "start: seal manifest.structural.json and run until review (python durable_job.py start)"
$PY durable_job.py start --manifest manifest.structural.json --state-dir "$STATE" --json
step "status: the operation journal (durable-job status)"
$DJ status --state-dir "$STATE" --json
step "inspect: sealed job, results, resultsSha256 (and a review page)"
$DJ inspect --state-dir "$STATE" --html "$STATE/../review.html" --json
HASH=$($DJ inspect --state-dir "$STATE" --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["resultsSha256"])')
step "decide: hold, bound to the reviewed results $HASH"
$DJ decide --state-dir "$STATE" --decision hold --reviewer demo-reviewer \
    --reason "structural demo: nothing real to approve" --results-sha256 "$HASH" --json
step "verify: every seal, hash and journal invariant, offline"
$DJ verify --state-dir "$STATE" --text
ASK=$(dirname "$STATE")/question
step "a question: seal fixtures/workshop.txt asking when the workshop is and at what time (seal --question, --fact, --draft)"
$DJ seal --out "$ASK/manifest.json" --job-id workshop-question --approved-by demo-owner --mode fake --model fake-1 \
    --question "When is the pottery workshop, and at what time?" --fact day:date --fact time:time --draft fixtures/workshop.txt --json
$DJ start --manifest "$ASK/manifest.json" --state-dir "$ASK/state" --text
step "inspect: the draft (the day, citing its quote; the program's note that the time is not stated), then the facts"
$DJ inspect --state-dir "$ASK/state" --text
printf '\nThe state lives in %s\n  review page: %s\n  try: sqlite3 %s/effects.sqlite "select operation_key,item_id,status from calls"\n' \
  "$STATE" "$(dirname "$STATE")/review.html" "$STATE"
