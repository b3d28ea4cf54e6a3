#!/bin/sh
# make test: the linter and the formatter's check first (a slip fails in a second, before anything else), then the
# type checker beside the suite (mypy is one process on one core; beside pytest's workers it costs the suite's wall time
# about half of its own: 20-25 s cold in a fresh clone), then pytest's ten slowest tests and the wall time of it all,
# passed or not. The installs (make's prerequisites) are not counted.
# Usage: scripts/test.sh VENV_BIN
bin=$1
began=$(date +%s)
status=0
for step in "$bin/ruff check ." "$bin/ruff format --check ."; do
    echo "$step"
    $step || { status=$?; break; }
done
if [ "$status" = 0 ]; then
    typed=$(mktemp)
    echo "$bin/mypy (beside the suite; its report follows the suite's)"
    "$bin/mypy" >"$typed" 2>&1 &
    mypy=$!
    echo "$bin/python -m pytest -q --durations=10"
    "$bin/python" -m pytest -q --durations=10 || status=$?
    wait "$mypy" || { typing=$?; [ "$status" = 0 ] && status=$typing; }
    echo "mypy:"
    cat "$typed"
    rm -f "$typed"
fi
echo "make test: $(($(date +%s) - began)) s of wall time for the linters, the type checker and the suite (exit $status)"
exit "$status"
