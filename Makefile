# The project's commands. Every target works from a fresh clone: `venv` creates .venv and
# installs the project (editable, with the dev and bench extras: the test suite also
# smoke-tests the benchmarks) unless it is already there.

PYTHON ?= python3.11
VENV ?= .venv
# demo nodes played by real node agents running real processes (the rest are simulated)
DEMO_REAL_NODES ?= pod-c-n15,pod-c-n16
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
# two pytest-xdist workers, a module's tests on one (tests/conftest.py); `make test XDIST=`
# runs the suite in one process
XDIST ?= -n 2 --dist loadfile

.PHONY: help venv install core demo test lint migrate seed serve replay bench bench-quick scenarios clean

help:
	@echo "make demo    create .venv, install, migrate SQLite, seed the demo, serve on $(HOST):$(PORT)"
	@echo "make test    create .venv, install, run the whole test suite (SQLite unless DATABASE_URL)"
	@echo "make core    compile the scheduling core with mypyc into build/core (demo, test, bench do)"
	@echo "make lint    ruff check"
	@echo "make bench   run the benchmarks (minutes); make bench-quick for a smoke run"
	@echo "make scenarios   simulate the worked examples in scenarios/examples/"
	@echo "make migrate / seed / serve / replay"

# The stamp is newer than the pyproject.toml files once the install succeeded: reinstall
# only when the dependencies change (or the virtualenv is new). clients/python is gpuq,
# the command line and SDK (its own package, standard library only): .venv/bin/gpuq.
$(VENV)/.installed: pyproject.toml clients/python/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]' -e ./clients/python
	@touch $@

venv install: $(VENV)/.installed

# The scheduling core compiled by mypyc into build/core/ (about a minute; nothing to do
# when the build there was made from the same sources). Without a C compiler the core
# runs its Python sources: same decisions, slower (SCHED_CORE_STRICT=1 makes it an error).
core: $(VENV)/.installed
	$(BIN)/python -m scheduler_app.core_build

migrate: $(VENV)/.installed
	$(BIN)/python manage.py migrate --no-input

seed: migrate core
	$(BIN)/python manage.py seed_demo

serve: $(VENV)/.installed core
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

# The web server and the embedded scheduler loop (`run_scheduler`) side by side: Ctrl-C
# stops both (the loop finishes its step and releases the lease). They share a metrics
# directory, so http://$(HOST):$(PORT)/metrics shows the loop's tick metrics.
demo: seed
	@metrics=$$(mktemp -d "$${TMPDIR:-/tmp}/sched-metrics.XXXXXX"); \
	export PROMETHEUS_MULTIPROC_DIR="$$metrics"; \
	$(BIN)/python manage.py run_scheduler & loop=$$!; \
	$(BIN)/python manage.py demo_real_agents --api http://$(HOST):$(PORT) \
	    --nodes $(DEMO_REAL_NODES) & real=$$!; \
	$(BIN)/python manage.py demo_agents --skip-nodes $(DEMO_REAL_NODES) & agents=$$!; \
	trap 'kill -TERM $$loop $$real $$agents 2>/dev/null; wait $$loop $$real $$agents; rm -rf "$$metrics"' EXIT; \
	trap 'exit 130' INT TERM; \
	echo "scheduler loop (pid $$loop), real node agents on $(DEMO_REAL_NODES) (pid $$real) and simulated agents (pid $$agents) running; web on http://$(HOST):$(PORT)"; \
	$(BIN)/python manage.py runserver $(HOST):$(PORT)

test: $(VENV)/.installed core
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(BIN)/ruff check .

replay: $(VENV)/.installed core
	$(BIN)/python manage.py replay --verify

# Benchmarks live outside the test suite (they take minutes); results go to
# bench/results/*.json and docs/PERFORMANCE.md with the machine and the date.
bench: $(VENV)/.installed core
	$(BIN)/python -m bench.run_all

bench-quick: $(VENV)/.installed core
	$(BIN)/python -m bench.run_all --quick

# Run the worked scenarios (scenarios/examples/) through the simulator and check each result.
scenarios: $(VENV)/.installed core
	@mkdir -p bench/out
	@for f in scenarios/examples/*.yaml; do \
	    out=bench/out/$$(basename $$f .yaml).json; \
	    $(BIN)/python -m scheduler_app.sim $$f --out $$out --quiet && \
	    $(BIN)/python -m scheduler_app.sim.invariants $$f $$out && echo "$$f -> $$out"; \
	done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis staticfiles build/core
