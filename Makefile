# rubyperf. Two set-up commands on a fresh machine: `make demo` and `make test`.
GO ?= go
export RUBYPERF_CACHE ?= $(HOME)/.cache/rubyperf
BIN := bin/rubyperf
FUZZTIME ?= 10s

.PHONY: build deps rubies lint test fuzz demo tables bench bench-micro clean generate check-generated

build:
	$(GO) build -o $(BIN) ./cmd/rubyperf

# Debian packages (apt-get; idempotent).
deps:
	@bash scripts/deps.sh

# Test Rubies, built from Debian source packages into $(RUBYPERF_CACHE) once.
rubies: deps
	@bash scripts/test-rubies.sh

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...

test: rubies lint check-generated
	$(GO) test -count=1 ./...
	@$(MAKE) --no-print-directory fuzz

# The BPF program's generated Go and object files (committed; clang only here).
generate: deps
	cd bpf && $(GO) generate ./...

check-generated: generate
	@git diff --quiet --exit-code -- 'bpf/*_bpfel.go' 'bpf/*_bpfel.o' || { git --no-pager diff --stat -- 'bpf/*_bpfel.*'; \
	  echo "bpf/ generated files are stale: run 'make generate' and commit them"; exit 1; }

# Every byte parser is fuzzed briefly on each test run; longer with FUZZTIME=10m.
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzOpenBinary$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./rubybuild
	$(GO) test -run='^$$' -fuzz='^FuzzParseMaps$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./rubystack
	$(GO) test -run='^$$' -fuzz='^FuzzParseVersion$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./rubybuild
	$(GO) test -run='^$$' -fuzz='^FuzzReplay$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./rubystack
	$(GO) test -run='^$$' -fuzz='^FuzzDisassemblyFinders$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./rubybuild
	$(GO) test -run='^$$' -fuzz='^FuzzReader$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./perfdata
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./perfmap
	$(GO) test -run='^$$' -fuzz='^FuzzDecodePayload$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./bpf
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeSample$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./bpf
	$(GO) test -run='^$$' -fuzz='^FuzzReadIdentity$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./debuginfo

demo: rubies build
	@bash scripts/demo.sh

# Regenerate the built-in layout tables (rubybuild/table_*.go) from the configured Ruby
# source trees in $(RUBYPERF_CACHE)/tables, in seconds; versions without a tree are
# noted and left out. `scripts/gen-tables.sh prepare [VERSION..]` makes the trees, once.
tables: build
	@bash scripts/gen-tables.sh tables

# One table of ratios against peers measured in the same run (bench/; about 9 minutes, root):
# target slowdown vs stackprof and perf record, BPF cost, post-processing vs perf script,
# attach time, recorder memory. BENCHFLAGS=-quick tries the harness in a minute.
bench: rubies build
	$(GO) run ./bench -o bench/RESULTS.md $(BENCHFLAGS) \
	  -dwarf-ruby "$$(sed -n 's/^exe=//p' $(RUBYPERF_CACHE)/ruby/source-3.1-shared/manifest)"

# Go micro-benchmarks of layout reading and snapshots.
bench-micro: rubies
	$(GO) test -run='^$$' -bench=. -benchmem ./rubybuild ./rubystack

clean:
	rm -rf bin demo-out
