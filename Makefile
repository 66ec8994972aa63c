# The few verbs people type. `make run` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test test-fast lint format bench soak drill screenshots clean

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

.env:
	@sed "s|^SECRET_KEY=.*|SECRET_KEY=$$($(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))')|" .env.example > .env
	@echo "Wrote .env from .env.example (a fresh SECRET_KEY)."

# make run PORT=8010: the web server's port (8000 by default).
run: $(VENV)/.installed .env
	HANDOVER_DEV_TOOLS=1 $(PY) manage.py runall $(if $(PORT),--port $(PORT))

# Everything, over two processes (pytest-xdist; each has its own test database, and a test
# module stays on one process with the sandbox and servers it shares). PYTEST_ARGS adds to it.
test: $(VENV)/.installed
	$(PY) -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)

# What needs no process of its own (no sandbox, cluster, browser, server), over two processes
# too: for the person changing the code. A test that starts a process is marked slow
# (tests/conftest.py).
test-fast: $(VENV)/.installed
	$(PY) -m pytest -n 2 --dist loadfile -m "not slow" $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(VENV)/.installed
	$(PY) bench/run.py

soak: $(VENV)/.installed
	$(PY) bench/soak.py --events 1000 --duplicate-rate 0.2 --fault-rate 0.2 --kill-every 10 --json bench/results/soak.json

screenshots: $(VENV)/.installed
	SCREENSHOTS_DIR=docs/screenshots $(PY) -m pytest tests/recovery/test_browser.py -k screenshots
	SCREENSHOTS_DIR=docs/screenshots $(PY) -m pytest tests/recovery/test_browser_config.py
	SCREENSHOTS_DIR=docs/screenshots $(PY) -m pytest tests/recovery/test_browser_notices.py
	SCREENSHOTS_DIR=docs/screenshots $(PY) -m pytest tests/recovery/test_browser_setup.py
	SCREENSHOTS_DIR=docs/screenshots $(PY) -m pytest tests/recovery/test_browser_documents.py
	SCREENSHOTS_DIR=docs/screenshots $(PY) -m pytest tests/recovery/test_browser_round_three.py
	SCREENSHOTS_DIR=docs/screenshots $(PY) -m pytest tests/recovery/test_browser_review_and_story.py
	SCREENSHOTS_DIR=docs/screenshots $(PY) -m pytest tests/recovery/test_browser_phone.py

drill: $(VENV)/.installed .env
	$(PY) manage.py migrate --noinput
	HANDOVER_DEV_TOOLS=1 $(PY) manage.py drill $(DRILL_ARGS)

clean:
	rm -rf $(VENV) var staticfiles
