# Two commands on a fresh machine (only Python 3.11+ needed):
#   make serve   install into .venv and start the server on its embedded defaults
#   make test    install into .venv and run ruff, mypy and the whole test suite
# Both also build the sandbox's Python (.sandbox-python: pandas, matplotlib, pypdf…), which the
# shell and code tools run and read_file extracts documents with.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?=
PORT ?=
SANDBOX_PYTHON := .sandbox-python
# Open WebUI for the browser suite (make e2e-openwebui): a venv of its own, reused across runs.
OPENWEBUI_VENV ?= $(HOME)/.cache/hermes-server/open-webui-0.12.4

.PHONY: serve simulate test fast lint fmt typecheck unit openapi openapi-check lock clean bench \
	sandbox-python sandbox-python-lock e2e-openwebui

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Reinstall whenever the pins or the project metadata change.
$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# Rebuilt whenever its pins change (deploy/sandbox-python/build says how).
$(SANDBOX_PYTHON)/.installed: deploy/sandbox-python/requirements.txt deploy/sandbox-python/build
	deploy/sandbox-python/build $(SANDBOX_PYTHON)

sandbox-python: $(SANDBOX_PYTHON)/.installed

serve: install sandbox-python
	$(BIN)/hermes-server serve $(if $(HOST),--host $(HOST)) $(if $(PORT),--port $(PORT))

simulate: install
	$(BIN)/hermes-server simulate --port 9100

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

# Rewrite the code as `make lint` wants it (formatting, and the fixes ruff can make itself).
fmt: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The Open WebUI filter in deploy/ is no package (it imports Open WebUI only inside Open WebUI),
# so it is checked on its own.
typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy deploy/openwebui/hermes_attachments.py

# The suite in two passes: the tests that start no server process in worker processes (as
# `make fast` runs them, PostgreSQL runs included), then those that do (`slow`: replicas,
# sandboxes, the browser) in SLOW_WORKERS processes, two by default: they mostly wait on the
# processes they start (~1.1 cores busy of 2), and they hold on a busy machine. 530 of them
# took 4 min 53 s in two processes, ~7 min in one (2 cores, 2026-11-26). Each process has a
# Redis server of its own (tests/redis_server.py). SLOW_WORKERS=0 runs them in this process.
SLOW_WORKERS ?= 2
unit: install sandbox-python
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -m "not slow" -n $(FAST_WORKERS) --dist loadscope
	$(BIN)/pytest -q -m slow -n $(SLOW_WORKERS)

test: lint typecheck openapi-check unit

# The inner loop: the tests without their PostgreSQL runs, without those that start server
# processes (markers in pyproject.toml) and without the browser suite, in two worker processes
# per core (pytest-xdist; FAST_WORKERS=0 runs them in one process): the tests mostly wait
# (timeouts, sleeps, processes starting), ~80 s of CPU in ~150 s of tests, so a second worker
# per core fills the waits (2 cores: ~85 s with 2 workers, ~60 s with 4). Bytecode is cached
# even where PYTHONDONTWRITEBYTECODE is set: pytest would otherwise rewrite every test
# module's asserts again in each worker (~4 s of CPU each). --dist loadscope hands out a module's
# tests together: what a module alone needs (the Agents SDK, ~1.5 s; a module-scoped server) is
# then paid for in one worker, not in each that draws one of its tests (63-65 s against 65-73 s
# for `load`, 2026-11-27; xdist_group marks, which loadgroup would honour, have no effect under
# pytest 9.2). `make test` is what CI runs.
FAST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc 2>/dev/null || echo 1) )))
fast: install sandbox-python
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -m "not slow and not postgres" --ignore=tests/e2e \
		-n $(FAST_WORKERS) --dist loadscope

# The browser suite: real Open WebUI in headless Chromium against a real server and the
# simulator (tests/e2e/openwebui; CONTRIBUTING.md). Builds what it needs once: Playwright into
# $(VENV) (the `e2e` extra), Open WebUI into $(OPENWEBUI_VENV), Debian's chromium when root.
# One test: make e2e-openwebui PYTEST_ARGS='-k reasoning'.
$(VENV)/.installed-e2e: $(VENV)/.installed
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,e2e]'
	touch $@

e2e-openwebui: install sandbox-python $(VENV)/.installed-e2e
	PYTHON=$(PYTHON) tests/e2e/openwebui/build-env $(OPENWEBUI_VENV)
	OPENWEBUI_VENV=$(OPENWEBUI_VENV) HERMES_REQUIRE_OPENWEBUI=1 \
		$(BIN)/pytest -m openwebui tests/e2e/openwebui $(PYTEST_ARGS)

openapi: install
	$(BIN)/python -m server.openapi_dump openapi/openapi.json

openapi-check: install
	$(BIN)/python -m server.openapi_dump --check openapi/openapi.json

# Benchmarks (not part of the tests): prompt-cache hit share, server overhead per request.
bench: install
	$(BIN)/python -m bench.cache_hits
	$(BIN)/python -m bench.store_writes
	$(BIN)/python -m bench.server_overhead

# Regenerate the pins from a fresh resolve of pyproject.toml (run deliberately, commit the result).
lock:
	rm -rf .lockenv && $(PYTHON) -m venv .lockenv
	.lockenv/bin/pip install -q --upgrade pip
	.lockenv/bin/pip install -q '.[dev,e2e]'
	.lockenv/bin/pip freeze --exclude hermes-server | grep -v '^-e' > constraints.txt
	rm -rf .lockenv

# Regenerate the sandbox Python's pins from requirements.in (run deliberately, commit the result).
sandbox-python-lock:
	rm -rf .lockenv && /usr/bin/python3 -m venv .lockenv
	.lockenv/bin/pip install -q --only-binary=:all: -r deploy/sandbox-python/requirements.in
	{ head -n 1 deploy/sandbox-python/requirements.txt; .lockenv/bin/pip freeze; } > .lockenv/pins
	mv .lockenv/pins deploy/sandbox-python/requirements.txt
	rm -rf .lockenv

clean:
	rm -rf $(VENV) $(SANDBOX_PYTHON) .mypy_cache .pytest_cache .ruff_cache
