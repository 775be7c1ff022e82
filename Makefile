# rubyperf. Two set-up commands on a fresh machine: `make demo` and `make test`.
GO ?= go
export RUBYPERF_CACHE ?= $(HOME)/.cache/rubyperf
BIN := bin/rubyperf
FUZZTIME ?=
# The version stamped into the binary and the package: a checkout's is
# 0.0.0~gitDATE.COMMIT (its last commit's), which sorts by date.
VERSION ?= $(shell git log -1 --format='0.0.0~git%cd.%h' --date=format:%Y%m%d --abbrev=12 2>/dev/null || echo 0.0.0~unknown)
PREFIX ?= /usr/local
DESTDIR ?=
DIST := dist
STATIC_FLAGS := -trimpath -ldflags '-s -w -X main.version=$(VERSION)'

.PHONY: build static install deb deps rubies viewers lint test test-pyroscope pyroscope fuzz fuzz-long soak demo tables tables-check bench bench-micro clean generate check-generated

build:
	$(GO) build -o $(BIN) ./cmd/rubyperf

# A static binary that needs nothing at run time (no libc), as installed.
static:
	CGO_ENABLED=0 $(GO) build $(STATIC_FLAGS) -o $(DIST)/rubyperf ./cmd/rubyperf

# make install [PREFIX=/usr/local] [DESTDIR=]: the binary make static built
# (built now if there is none: `make static && sudo make install` needs no
# Go for root), and the agent's systemd unit (not enabled) pointing at it.
$(DIST)/rubyperf:
	$(MAKE) static
install: $(DIST)/rubyperf
	install -D -m 0755 $(DIST)/rubyperf $(DESTDIR)$(PREFIX)/bin/rubyperf
	install -d -m 0755 $(DESTDIR)$(PREFIX)/lib/systemd/system
	sed 's#/usr/local/bin/rubyperf#$(PREFIX)/bin/rubyperf#' deploy/systemd/rubyperf-agent.service \
	  > $(DESTDIR)$(PREFIX)/lib/systemd/system/rubyperf-agent.service
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/rubyperf-agent.service

# The Debian package, $(DIST)/rubyperf_VERSION_amd64.deb (nfpm, a Go
# module: packaging/tools), installing into /usr.
deb: static
	sed 's#/usr/local/bin/rubyperf#/usr/bin/rubyperf#' deploy/systemd/rubyperf-agent.service > $(DIST)/rubyperf-agent.service
	VERSION='$(VERSION)' $(GO) tool -modfile=packaging/tools/go.mod nfpm package \
	  --config packaging/nfpm.yaml --packager deb --target $(DIST)/

# Debian packages (apt-get; idempotent).
deps:
	@bash scripts/deps.sh

# Test Rubies, built from Debian source packages into $(RUBYPERF_CACHE) once.
rubies: deps
	@bash scripts/test-rubies.sh

# The web viewers the browser tests open recordings in (speedscope, from npm), pinned
# by testdata/viewers/package-lock.json, into $(RUBYPERF_CACHE)/npm once.
viewers: deps
	@bash scripts/viewers.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags pyroscope ./agent ./cmd/rubyperf ./internal/pyroscopetest

# Every test, through internal/cmd/testsummary: failures whole, then a line counting
# tests passed, failed and skipped, naming each skip. Under CI=true or
# RUBYPERF_REQUIRE_BPF=1 (.ci/run) a skip fails the run. cmd/rubyperf, whose tests
# run one after another on every test Ruby, takes about 25 minutes on 2 cores with
# this machine's 15 Rubies: the bound is 40, inside CI's 90.
test: rubies viewers lint check-generated
	$(GO) run ./internal/cmd/testsummary $(GO) test -json -count=1 -timeout 60m ./...
	@$(MAKE) --no-print-directory fuzz

# Grafana Pyroscope from a copy of its repository (SRC=DIR), into $(RUBYPERF_CACHE)/pyroscope:
# not in CI, whose module proxy does not serve it. See scripts/pyroscope.sh.
pyroscope:
	@bash scripts/pyroscope.sh "$(SRC)"

# The tests against a real Pyroscope (make pyroscope first): the agent's profiles over
# OTLP/gRPC, OTLP/HTTP, through a Collector and to the ingest API, queried back.
# `go test -tags pyroscope ./agent -run TestPyroscopeAccepts -update` rewrites
# agent/testdata/pyroscope-accepted.json, which make test checks.
test-pyroscope: rubies
	$(GO) test -tags pyroscope -count=1 -timeout 15m -run 'Pyroscope' -v ./agent ./cmd/rubyperf

# The BPF program's generated Go and object files, then the Go declarations of the
# records it writes, from the objects' BTF (committed; clang only here).
GENERATED := 'bpf/*_bpfel.go' 'bpf/*_bpfel.o' payload/types_generated.go
generate: deps
	cd bpf && $(GO) generate ./...
	cd payload && $(GO) generate ./...

check-generated: generate
	@git diff --quiet --exit-code -- $(GENERATED) || { git --no-pager diff --stat -- $(GENERATED); \
	  echo "generated files are stale: run 'make generate' and commit them"; exit 1; }

# Every byte parser is fuzzed on each test run for a fixed number of inputs (a few
# seconds each on 2 cores; scripts/fuzz-targets lists them); FUZZTIME=10m fuzzes each
# for that long instead.
fuzz:
	@bash scripts/fuzz.sh

# A million inputs per fuzz target (hours on 2 cores), outside make test; writes the
# counts to fuzz-report.md. FUZZ_LONG=N for another number.
FUZZ_LONG ?= 1000000
fuzz-long:
	@FUZZTIME=$(FUZZ_LONG)x bash scripts/fuzz.sh --report fuzz-report.md
	@cat fuzz-report.md

# A long recording (30 minutes at 999 Hz, multi-threaded; SOAK=5m for less), outside
# make test: lost samples must be 0 and the recorder's RSS flat; see scripts/soak.sh.
soak: rubies build
	@bash scripts/soak.sh

demo: rubies build
	@bash scripts/demo.sh

# Regenerate the built-in layout tables (rubybuild/table_*.go) from the configured Ruby
# source trees in $(RUBYPERF_CACHE)/tables, in seconds; versions without a tree are
# noted and left out. `scripts/gen-tables.sh prepare [VERSION..]` makes the trees, once.
tables: build
	@bash scripts/gen-tables.sh tables

# The committed tables against configured source trees (scripts/gen-tables.sh prepare
# VERSION): a developer's check, outside make test, which prepares no tree.
tables-check:
	$(GO) test -count=1 -tags tables -run 'TestTablesUpToDate|TestProbeEquals' ./rubybuild

# One table of ratios against peers measured in the same run (bench/; about 15 minutes, root):
# target slowdown vs stackprof and perf record, BPF cost, post-processing vs perf script,
# attach time, recorder memory. BENCHFLAGS=-quick tries the harness in a minute.
bench: rubies build
	$(GO) run ./bench -o bench/RESULTS.md $(BENCHFLAGS) \
	  -dwarf-ruby "$$(sed -n 's/^exe=//p' $(RUBYPERF_CACHE)/ruby/source-3.1-shared/manifest)"

# Go micro-benchmarks of layout reading, snapshots and attaching.
bench-micro: rubies
	$(GO) test -run='^$$' -bench=. -benchmem ./rubybuild ./rubystack ./recording

clean:
	rm -rf bin demo-out $(DIST)
