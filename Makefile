# The two set-up commands a new user needs: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PROTOS := logbus/core/envelope.proto logbus/core/state.proto

.PHONY: run test install install-test proto bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

run: install
	$(VENV)/bin/logbus serve --data-dir ./data

test: install-test
	$(PY) -m pytest -q

# Regenerate the committed protobuf modules (tests/unit/test_proto_fresh.py fails when stale).
proto: install-test
	$(PY) -m grpc_tools.protoc -I. --python_out=. $(PROTOS)

bench: install
	$(PY) bench/log_append.py

clean:
	rm -rf $(VENV) build *.egg-info
