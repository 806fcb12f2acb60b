# The two set-up commands a new user needs: `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
PROTOS := logbus/core/envelope.proto logbus/core/state.proto

.PHONY: run test install install-test build spark proto bench clean debian-tools sslyze \
	console-vendor console-screenshots FORCE

# Debian packages installed when missing, through sudo unless run as root: `$(call apt,PKGS)`.
apt = SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(1) >/dev/null

# The interpreter .venv is made with (decision 0043, docs/development.md): an optimised
# CPython >= 3.11 where one is installed (Debian's /usr/bin/python3.11 is built with PGO
# and LTO; a source build only with --enable-optimizations --with-lto), said in one line
# at every `make run` and `make test`; `make PYTHON=python3.13 ...` (or PYTHON in the
# environment) chooses instead. tools/venv.sh makes .venv again when it was made by another
# interpreter (.venv/.interpreter records which), so a stale venv never keeps the slow
# one; the record's mtime changes only then, and everything is installed again. It also
# installs Debian's python3.X-venv, python3.X-dev and gcc when missing (the compiled
# modules: setup.py; without a compiler the build is pure).
INTERPRETER := $(VENV)/.interpreter
$(INTERPRETER): FORCE
	@sh tools/venv.sh "$(PYTHON)" $(VENV)

# An editable install whose .pth puts the repository root on sys.path: PySpark finds data
# sources by listing the pyspark_* modules on sys.path (pkgutil.iter_modules), which does
# not see an import hook, so pyspark_logbus would not be found outside the repository.
# pyproject.toml's `package-dir = {"" = "."}` is what makes setuptools' default editable
# mode write that .pth (its deprecated compat mode did the same, with a warning block).
# The install builds the compiled modules in place (setup.py, logbus/compiled.py).
$(VENV)/.installed: pyproject.toml setup.py Makefile $(INTERPRETER)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml setup.py Makefile $(INTERPRETER) | debian-tools
	$(PY) -m pip install -q -e '.[test,spark]'
	$(PY) -m logbus.spark.warm
	touch $@ $(VENV)/.installed

# The compiled modules built again when a source changed since they were built (or the
# list did, or LOGBUS_PURE changed): logbus/compiled.py compares each source with its hash
# in logbus/compiled.json (-P: run as a file, the logbus directory must not shadow stdlib
# modules). Then one line says which build runs: compiled, or pure Python and why.
build:
	@if $(PY) -P logbus/compiled.py --needs-build; then $(PY) -m pip install -q --no-deps -e .; fi
	@$(PY) -P logbus/compiled.py

# The Spark data source's extra (pyspark, pyarrow, numpy, numba: docs/spark.md) without
# the test toolchain; `make run` serves without it. logbus.spark.warm compiles the record
# decoder into numba's cache then, so no first read in a new process compiles it (~4 s).
spark: install
	$(PY) -m pip install -q -e '.[spark]'
	$(PY) -m logbus.spark.warm

# Debian tools the tests drive, as command:package (kcat: a librdkafka command-line client;
# java: the runtime local Spark needs for tests/spark; mosquitto_pub/mosquitto_sub: MQTT
# command-line clients; mosquitto: the peer broker of bench/mqtt_bench.py, by its full path
# because /usr/sbin is not on every user's PATH; curl: the HTTP API's client in tests and docs;
# chromium and chromedriver: the headless browser tests/browser drives through Selenium, from
# one Debian source package so their versions always match: decision 0035). A broker installed
# here is a test peer, not a service: on a machine run by systemd, the mosquitto service the
# package starts is stopped and disabled again (it would hold port 1883, which `make run` needs).
PROMETHEUS := .tools/prometheus/usr/bin/prometheus
DEBIAN_TOOLS := kcat:kcat java:openjdk-17-jre-headless mosquitto_pub:mosquitto-clients curl:curl \
	/usr/sbin/mosquitto:mosquitto chromium:chromium chromedriver:chromium-driver
debian-tools: $(PROMETHEUS)
	@missing=""; for tp in $(DEBIAN_TOOLS); do command -v $${tp%%:*} >/dev/null || missing="$$missing $${tp#*:}"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		$(call apt,$$missing); \
		case " $$missing " in *" mosquitto "*) if [ -d /run/systemd/system ]; then \
			$$SUDO systemctl disable --now mosquitto.service; fi;; esac; \
	fi

# prometheus, the server tests/integration/test_prometheus.py starts to scrape /metrics: its
# Debian package unpacked under .tools/, not installed (installed, it runs a Prometheus service
# on port 9090 and recommends a node exporter on 9100). The program needs only libc.
$(PROMETHEUS):
	@mkdir -p .tools && cd .tools && rm -f prometheus_*.deb && \
	{ apt-get download prometheus 2>/dev/null || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && apt-get download prometheus; }; } && \
	rm -rf prometheus && dpkg-deb -x prometheus_*.deb prometheus && rm prometheus_*.deb
	@test -x $@

# sslyze (PyPI), the TLS scanner tests/integration/test_tls_scan.py runs against every TLS
# listener, in a venv of its own: it pins a cryptography older than the broker's.
SSLYZE_VENV := .venv-sslyze
$(SSLYZE_VENV)/.installed: | $(INTERPRETER)
	$$(cat $(INTERPRETER)) -m venv $(SSLYZE_VENV)
	$(SSLYZE_VENV)/bin/python -m pip install -q sslyze==6.3.1
	touch $@
sslyze: $(SSLYZE_VENV)/.installed

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

run: install build
	$(VENV)/bin/logbus serve --data-dir ./data

# The suite over the cores with pytest-xdist, two workers a core: its tests mostly wait (on
# fsyncs, on servers starting, on protocol timers), so a run at one worker a core leaves half
# the CPU idle (docs/development.md: the tiers, their times, the measurement).
# PYTEST_WORKERS=1 runs it in one process.
PYTEST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc 2>/dev/null || echo 1) )))
# The whole suite against the compiled build, then the unit and core tiers again pure
# (LOGBUS_PURE=1: the compiled modules loaded from their .py; lint and types, which do not
# depend on it, once), so that both builds pass the same tests (docs/development.md).
PURE_TIERS := tests/unit tests/core --deselect tests/unit/test_lint.py::test_ruff_is_clean \
	--deselect tests/unit/test_typing.py::test_mypy_is_clean
test: debian-tools install-test build sslyze
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --durations=25
	LOGBUS_PURE=1 $(PY) -m pytest -q -n $(PYTEST_WORKERS) $(PURE_TIERS)

# Regenerate the committed protobuf modules (tests/unit/test_proto_fresh.py fails when stale).
proto: install-test
	$(PY) -m grpc_tools.protoc -I. --python_out=. $(PROTOS)

# The web console's vendored JavaScript, fetched again from the npm registry at the versions
# in its VERSIONS file (tests/unit/test_console_vendor.py checks the files against it).
VENDOR := logbus/gateway/http/console/static/vendor
console-vendor:
	@tmp=$$(mktemp -d); \
	grep -v '^#' $(VENDOR)/VERSIONS | awk 'NF == 4 {print $$3}' | while read url; do \
		curl -fsSL "$$url" | tar xz -C $$tmp --one-top-level=$$(basename $$url .tgz); done; \
	cp $$tmp/htmx.org-*/package/dist/htmx.min.js $$tmp/htmx.org-*/package/LICENSE $(VENDOR)/htmx/; \
	cp $$tmp/uplot-*/package/dist/uPlot.iife.min.js $$tmp/uplot-*/package/dist/uPlot.min.css \
		$$tmp/uplot-*/package/LICENSE $(VENDOR)/uplot/; \
	rm -rf $$tmp

# The console's screenshots in docs/operations.md, made again from a real server and a real
# browser (tests/browser/test_console_screenshots.py): docs/images/console-*.png.
console-screenshots: debian-tools install-test
	LOGBUS_CONSOLE_SCREENSHOTS=docs/images $(PY) -m pytest -q tests/browser/test_console_screenshots.py

bench: install build
	$(PY) bench/log_append.py

# the compiled build too: every extension in the tree, mypyc's shared library, the manifest
clean:
	rm -rf $(VENV) $(SSLYZE_VENV) .tools build *.egg-info logbus__mypyc.* logbus/compiled.json
	find logbus -name '*.so' -delete
