# rubyperf. Two set-up commands on a fresh machine: `make demo` and `make test`.
GO ?= go
export RUBYPERF_CACHE ?= $(HOME)/.cache/rubyperf
BIN := bin/rubyperf
FUZZTIME ?= 10s

.PHONY: build deps rubies lint test fuzz demo tables bench clean generate check-generated

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
	@git diff --quiet --exit-code -- bpf/ || { git --no-pager diff --stat -- bpf/; \
	  echo "bpf/ generated files are stale: run 'make generate' and commit them"; exit 1; }

# Every byte parser is fuzzed briefly on each test run; longer with FUZZTIME=10m.
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzOpenBinary$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./rubystack
	$(GO) test -run='^$$' -fuzz='^FuzzParseMaps$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./rubystack
	$(GO) test -run='^$$' -fuzz='^FuzzParseVersion$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./rubystack
	$(GO) test -run='^$$' -fuzz='^FuzzReplay$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./rubystack
	$(GO) test -run='^$$' -fuzz='^FuzzReader$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./perfdata
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./perfmap
	$(GO) test -run='^$$' -fuzz='^FuzzDecodePayload$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./bpf
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeSample$$' -fuzztime=$(FUZZTIME) -fuzzminimizetime=1s ./bpf

demo: rubies build
	@bash scripts/demo.sh

# Regenerate the built-in layout tables from the DWARF of the source-built Rubies.
tables: rubies build
	$(BIN) offsets --format go $(RUBYPERF_CACHE)/ruby/3.1.2-shared/vm > rubystack/table_3_1_2_x86_64.go
	$(BIN) offsets --format go $(RUBYPERF_CACHE)/ruby/3.3.8-static/vm > rubystack/table_3_3_8_x86_64.go

bench: rubies
	$(GO) test -run='^$$' -bench=. -benchmem ./rubystack

clean:
	rm -rf bin demo-out
