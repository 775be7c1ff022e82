# rubyperf. Two set-up commands on a fresh machine: `make demo` and `make test`.
GO ?= go
export RUBYPERF_CACHE ?= $(HOME)/.cache/rubyperf
BIN := bin/rubyperf
FUZZTIME ?=

.PHONY: build deps rubies viewers lint test fuzz demo tables bench bench-micro clean generate check-generated

build:
	$(GO) build -o $(BIN) ./cmd/rubyperf

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

test: rubies viewers lint check-generated
	$(GO) test -count=1 -timeout 25m ./...
	@$(MAKE) --no-print-directory fuzz

# The BPF program's generated Go and object files (committed; clang only here).
generate: deps
	cd bpf && $(GO) generate ./...

check-generated: generate
	@git diff --quiet --exit-code -- 'bpf/*_bpfel.go' 'bpf/*_bpfel.o' || { git --no-pager diff --stat -- 'bpf/*_bpfel.*'; \
	  echo "bpf/ generated files are stale: run 'make generate' and commit them"; exit 1; }

# Every byte parser is fuzzed on each test run for a fixed number of inputs (a few
# seconds each on 2 cores); FUZZTIME=10m fuzzes each for that long instead. A count,
# not a duration, by default: Go 1.26's fuzz coordinator can fail a duration run with a
# bare "context deadline exceeded" when a busy worker misses the deadline
# (go.dev/issue/75804); a count has no deadline to miss.
fuzz_one = $(GO) test -run='^$$' -fuzz='^$(1)$$' -fuzztime=$(or $(FUZZTIME),$(3)) -fuzzminimizetime=1s $(2)
fuzz:
	$(call fuzz_one,FuzzOpenBinary,./rubybuild,2000x)
	$(call fuzz_one,FuzzParseMaps,./rubystack,50000x)
	$(call fuzz_one,FuzzParseVersion,./rubybuild,50000x)
	$(call fuzz_one,FuzzReplay,./rubystack,1000x)
	$(call fuzz_one,FuzzDisassemblyFinders,./rubybuild,20000x)
	$(call fuzz_one,FuzzReader,./perfdata,50000x)
	$(call fuzz_one,FuzzParse,./perfmap,100000x)
	$(call fuzz_one,FuzzDecodePayload,./bpf,40000x)
	$(call fuzz_one,FuzzDecodeSample,./bpf,40000x)
	$(call fuzz_one,FuzzReadIdentity,./debuginfo,30000x)

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
