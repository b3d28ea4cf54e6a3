# Two commands do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
N      ?= 6

.PHONY: demo test system-deps bench crash-fuzz mutate clean

# The runtime pins, then this project itself (editable: `durable-job` on the
# venv's PATH runs this checkout's durable_job.py, the same bytes `python durable_job.py` runs).
$(VENV)/.runtime: requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit("durable_job needs Python 3.11+, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet -r requirements.txt
	$(PIP) install --quiet --no-deps -e .
	@touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt requirements-mcp.txt requirements-postgres.txt requirements-web.txt
	$(PIP) install --quiet -r requirements-dev.txt
	@touch $@

# The LiteLLM proxy, a real OpenAI-compatible server the chat tests run the program through, in an environment of its own.
$(VENV)/litellm/.installed: $(VENV)/.runtime requirements-litellm.txt
	$(PYTHON) -m venv $(VENV)/litellm
	$(VENV)/litellm/bin/python -m pip --disable-pip-version-check install --quiet -r requirements-litellm.txt
	@touch $@

demo: $(VENV)/.runtime
	@sh scripts/demo.sh $(VENV)/bin

# Debian packages the tests need (headless Chromium): installed here, or named at once.
system-deps:
	@sh scripts/system-deps.sh

# The linter and the formatter's check first (a slip fails in a second), then the type checker beside the suite; it ends
# with the ten slowest tests and the wall time of it all (the installs above aside), passed or not: scripts/test.sh.
test: $(VENV)/.dev $(VENV)/litellm/.installed system-deps
	@sh scripts/test.sh $(VENV)/bin

# The program before the command API (issue 20) is measured in the same run: `make bench BENCH_BEFORE=REV` names another.
BENCH_BEFORE ?= aa07c23
# The floor (bench/floor.py): this program beside bare LangGraph and DBOS (installed into bench/.peers-venv, a throwaway
# environment) on one 3-item job, every fsync held to 2 ms; FLOOR_BEFORE, the program before the floor issue, measured too.
FLOOR_BEFORE ?= 7a8ab36
bench: $(VENV)/.dev
	$(PY) bench/bench.py --before $(BENCH_BEFORE)
	$(PY) bench/web.py
	$(PY) bench/lasting.py
	$(PY) bench/hostile.py
	$(PY) bench/encrypted.py
	$(PY) bench/floor.py $(if $(FLOOR_BEFORE),--before $(FLOOR_BEFORE))

# Each named mutant (mutate/mutants.py) applied alone to a copy of the repository; its guarantee's tests
# must notice it. Slow (minutes), so not part of `make test`: run it after changing a guarantee or its tests.
mutate: $(VENV)/.dev system-deps
	$(PY) mutate/run.py $(MUTANTS)

crash-fuzz: $(VENV)/.dev
	DURABLE_JOB_FUZZ_JOBS=$(N) $(PY) -m pytest -q -n 0 tests/test_faults.py -k random_kills -s

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis durable_job.egg-info
