# Everyday tasks. `make test` is what CI runs first (see .ci/run for the whole of CI).
PY ?= .venv/bin/python

.PHONY: venv test test-all lint docs fixtures golden golden-accept bench fuzz ci

venv:
	python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]'

test:
	$(PY) -m pytest -q

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports

docs:  # regenerate docs/cli.md's option reference; the docs' examples run, every name is documented
	$(PY) docs/gen_cli.py
	$(PY) -m pytest -q tests/test_docs.py tests/test_sql.py tests/test_scan.py -k "docs or doc_examples"

fixtures:  # regenerate the planted-truth fixtures (CI fails when they are stale)
	$(PY) -m fixtures.generate

golden:  # show every figure that would change in tests/golden/ (writes nothing)
	$(PY) -m tests.golden

golden-accept:  # ... and write it: only when a figure changes on purpose; say why in the commit
	$(PY) -m tests.golden --accept

bench:  # speed and memory, each as ratios measured in one run
	$(PY) benchmarks/load.py --only import traceview first-open re-open
	$(PY) benchmarks/summarize.py
	$(PY) benchmarks/sql.py
	$(PY) benchmarks/heartbeat.py
	$(PY) benchmarks/scan.py

fuzz:  # the loader on mutated real traces, longer than CI's pass
	$(PY) tests/test_fuzz.py --examples 3000

ci:
	bash .ci/run
