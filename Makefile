# The two set-up commands a new user needs: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PROTOS := logbus/core/envelope.proto logbus/core/state.proto

.PHONY: run test install install-test spark proto bench clean debian-tools sslyze console-vendor console-screenshots

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# An editable install whose .pth puts the repository root on sys.path: PySpark finds data
# sources by listing the pyspark_* modules on sys.path (pkgutil.iter_modules), which does
# not see an import hook, so pyspark_logbus would not be found outside the repository.
# pyproject.toml's `package-dir = {"" = "."}` is what makes setuptools' default editable
# mode write that .pth (its deprecated compat mode did the same, with a warning block).
$(VENV)/.installed: pyproject.toml Makefile | $(PY)
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml Makefile | $(PY) debian-tools
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $@ $(VENV)/.installed

# The Spark data source's extra (pyspark, pyarrow, numpy, numba: docs/spark.md) without
# the test toolchain; `make run` serves without it.
spark: install
	$(PY) -m pip install -q -e '.[spark]'

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
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
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
$(SSLYZE_VENV)/.installed:
	$(PYTHON) -m venv $(SSLYZE_VENV)
	$(SSLYZE_VENV)/bin/python -m pip install -q sslyze==6.3.1
	touch $@
sslyze: $(SSLYZE_VENV)/.installed

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

run: install
	$(VENV)/bin/logbus serve --data-dir ./data

# The suite over the cores with pytest-xdist, two workers a core: its tests mostly wait (on
# fsyncs, on servers starting, on protocol timers), so a run at one worker a core leaves half
# the CPU idle (docs/development.md: the tiers, their times, the measurement).
# PYTEST_WORKERS=1 runs it in one process.
PYTEST_WORKERS ?= $(shell echo $$(( 2 * $$(nproc 2>/dev/null || echo 1) )))
test: debian-tools install-test sslyze
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --durations=25

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

bench: install
	$(PY) bench/log_append.py

clean:
	rm -rf $(VENV) $(SSLYZE_VENV) .tools build *.egg-info
