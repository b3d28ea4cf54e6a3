#!/bin/sh
# make test: the linter and the formatter's check first (a slip fails in a second, before anything else), then, side
# by side, the type checker (one process on one core), the journeys that mostly wait on the clock (conftest.WAITS,
# marked `waits`: one pytest process of their own, a few seconds of CPU each) and the rest of the suite (pytest's
# workers, one per core), so that neither the type checker nor a waiting journey leaves a core idle. Then the reports
# of the type checker and the waiting journeys, and the wall time of it all, passed or not. The installs (make's
# prerequisites) are not counted.
# Usage: scripts/test.sh VENV_BIN
bin=$1
began=$(date +%s)
status=0
for step in "$bin/ruff check ." "$bin/ruff format --check ."; do
    echo "$step"
    $step || { status=$?; break; }
done
if [ "$status" = 0 ]; then
    side=$(mktemp -d)
    echo "$bin/mypy, and $bin/python -m pytest -q -n 0 -m waits (beside the suite: their reports follow its own)"
    "$bin/mypy" >"$side/mypy" 2>&1 &
    mypy=$!
    "$bin/python" -m pytest -q -n 0 -m waits --basetemp="$side/waits" --durations=3 >"$side/waits.out" 2>&1 &
    waits=$!
    echo "$bin/python -m pytest -q -m 'not waits' --durations=10"
    "$bin/python" -m pytest -q -m "not waits" --basetemp="$side/suite" --durations=10 || status=$?
    echo "the journeys that wait (pytest -m waits):"
    if wait "$waits"; then tail -n 6 "$side/waits.out"; else
        code=$?
        [ "$status" = 0 ] && status=$code
        cat "$side/waits.out"
    fi
    wait "$mypy" || { code=$?; [ "$status" = 0 ] && status=$code; }
    echo "mypy:"
    cat "$side/mypy"
    rm -rf "$side"
fi
echo "make test: $(($(date +%s) - began)) s of wall time for the linters, the type checker and the suite (exit $status)"
exit "$status"
