# tierpool's front door. Two commands do everything on a fresh Debian/Ubuntu machine:
#   make bench    install what is missing, build Release, run every step's benchmark beside the
#                 peers, print the side-by-side tables, write docs/results/ (CSV, JSON, plots)
#   make test     build and run every test: ASan+UBSan, TSan, valgrind memcheck, Release (drop-in
#                 and preload tests), the fuzz targets (clang), every step configured on its own
# More:
#   make bench STEP=step05-tls-global     one step (its rows in docs/results/results.csv replaced)
#   make bench STEP=... FILTER=shuffle64  only the entries whose name matches the regex
#   make bench REPS=5 ROUNDS=5 MIN_TIME=0.5   samples per row, spread over rounds of the whole
#                                         plan (one process per row and round), each at least
#                                         MIN_TIME seconds (3, 3, 0.2 by default)
#   make perf STEP=step01-rational-freelist [FILTER=regex]   perf record + report (a profile a
#                                         chapter shows also writes its docs/results/perf/ excerpt)
#   make perf STEP=all                    every profile and perf-diff the chapters show, excerpts
#                                         written again (scripts/check_docs.py --write shows them)
#   make perf-diff A=step01-rational-freelist B=step02-template-pool
#   make results                          regenerate tables and plots from the last CSV
#   make trace PROG="python3 x.py" NAME=x  record a program's allocations as common/traces/x.tptrace.xz
#                                         (replayed by step 06's benchmark; docs/traces.md;
#                                         OUT=dir writes it elsewhere)
#   make install [PREFIX=/usr/local]      step06's libtierpool (.so, .a), header, CMake package,
#                                         pkg-config file: builds only those, in build/install
#                                         (no tests, no benchmarks, no package installs)
SHELL := /bin/bash
.DEFAULT_GOAL := help

STEP ?=
FILTER ?=
REPS ?= 3
ROUNDS ?= 3
MIN_TIME ?= 0.2
A ?=
B ?=
PREFIX ?= /usr/local
PROG ?=
NAME ?= trace
OUT ?=
# Debian's python3 (matplotlib comes from Debian's python3-matplotlib).
PYTHON := $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
JOBS ?= $(shell nproc)

.PHONY: help deps-build deps-test deps-bench release bench results test perf perf-diff install \
        format clean trace

help:
	@sed '/^SHELL/,$$d' Makefile | sed 's/^# \{0,1\}//'

deps-build:
	@scripts/install-deps.sh build
deps-test:
	@scripts/install-deps.sh test
deps-bench:
	@scripts/install-deps.sh bench

release: deps-build
	@cmake --preset release >/dev/null
	@cmake --build --preset release -j $(JOBS)

bench: deps-bench release
	@$(PYTHON) scripts/bench.py $(STEP) --repetitions $(REPS) --rounds $(ROUNDS) --min-time $(MIN_TIME) \
	    --instructions $(if $(FILTER),--filter '$(FILTER)')
	@$(MAKE) --no-print-directory results

results:
	@$(PYTHON) scripts/results.py

test: deps-test
	@scripts/test.sh

perf: deps-bench release
	@scripts/perf.sh record "$(STEP)" "$(FILTER)"

perf-diff: deps-bench release
	@scripts/perf.sh diff "$(A)" "$(B)"

# PROG reaches the script through the environment, quotes and all.
trace: deps-build
	@test -n "$$PROG" || { echo 'usage: make trace PROG="program args" [NAME=name]'; exit 2; }
	@$(PYTHON) scripts/trace.py record "$$NAME" "$$PROG" $(if $(OUT),--out '$(OUT)')

install:
	@scripts/install.sh "$(PREFIX)" $(JOBS)

format:
	@git ls-files '*.cpp' '*.h' '*.c' | xargs clang-format -i

clean:
	rm -rf build
