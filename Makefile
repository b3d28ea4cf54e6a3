# Two commands do all the set-up: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
N      ?= 6

.PHONY: demo test bench crash-fuzz clean

$(VENV)/.runtime: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit("durable_job needs Python 3.11+, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt requirements-mcp.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

demo: $(VENV)/.runtime
	@sh scripts/demo.sh $(PY)

test: $(VENV)/.dev
	$(PY) -m pytest -q

bench: $(VENV)/.dev
	$(PY) bench/bench.py

crash-fuzz: $(VENV)/.dev
	DURABLE_JOB_FUZZ_JOBS=$(N) $(PY) -m pytest -q tests/test_faults.py -k random_kills -s

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
