# cq — a durable job queue for shell pipelines, cron jobs, CI and operators.
GOLANGCI_VERSION := v2.15.0
BIN      := $(CURDIR)/bin
GOLANGCI := $(BIN)/golangci-lint-$(GOLANGCI_VERSION)
BENCHSTAT_VERSION := v0.0.0-20260908200009-22c9c6c9d4da
BENCHSTAT := $(BIN)/benchstat-$(BENCHSTAT_VERSION)
BENCH_COUNT ?= 6
GO       ?= go
FUZZTIME ?= 20s
# How bin/cq (and bench's floor binary) are built: without the symbol table
# and DWARF (-s -w), and linked statically (cgo's libc too, so no dynamic
# loader runs at start). Each cq command then starts about 1 ms sooner
# (docs/performance.md, "Choices the measurements made"). Panics still print their stack
# traces and CPU profiles still name functions. go test builds as usual.
# Where no static libc is installed, build falls back to go build's defaults.
BUILD_TAGS    := osusergo netgo sqlite_omit_load_extension
BUILD_LDFLAGS := -s -w -linkmode=external -extldflags=-static
GOBUILD        = $(GO) build -tags '$(BUILD_TAGS)' -ldflags '$(BUILD_LDFLAGS)'

.DEFAULT_GOAL := help
.PHONY: help build man bench-bins test test-pg browser lint fmt bench bench-go bench-e2e bench-river bench-maint fuzz cover demo demo-pg clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/cq
	$(GOBUILD) -o $(BIN)/cq ./cmd/cq || { echo "static link failed: building bin/cq with go build's defaults" >&2; $(GO) build -o $(BIN)/cq ./cmd/cq; }

man: ## write the man pages into man/ (cq.1, cq-ls.1, …)
	$(GO) run -tags man ./cmd/cq __man $(CURDIR)/man

bench-bins: ## build bench's floor (as bin/cq is built) and spawn reference into bin/
	$(GOBUILD) -o $(BIN)/floor ./bench/floor || $(GO) build -o $(BIN)/floor ./bench/floor
	$(GO) build -o $(BIN)/spawnref ./bench/spawnref

test: lint browser ## lint, then every test with -race -shuffle=on, on SQLite and then on PostgreSQL
	$(GO) test -race -shuffle=on -count=1 -timeout 20m ./...
	$(MAKE) --no-print-directory test-pg

# The tests whose store is chosen by CQ_TEST_DB (the domain's, the
# worker's, the CLI scripts), again on PostgreSQL: the server of
# $CQ_TEST_PG_URL, else the local one; with neither, they skip saying so.
test-pg: ## run the backend-chosen tests on PostgreSQL
	CQ_TEST_DB=postgres $(GO) test -race -shuffle=on -count=1 -timeout 30m ./cmd/... ./internal/...

# The dashboard's browser test drives Debian's Chromium: installed here
# when it is missing and this user can (root, with apt-get); elsewhere the
# test skips, saying so.
browser: ## install Chromium for the dashboard's browser test, where possible
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; }; } && \
		echo "installed chromium for the dashboard's browser test"; } || \
		echo "chromium is not installed (needs root and apt-get): the dashboard's browser test will skip"

lint: $(GOLANGCI) ## run golangci-lint (installed into ./bin at a pinned version)
	$(GOLANGCI) run ./...

$(GOLANGCI):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	mv $(BIN)/golangci-lint $(GOLANGCI)

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

bench: build bench-bins $(BENCHSTAT) ## Go benchmarks + benchstat, end-to-end run vs peers, goals table PASS/MISS, River on PostgreSQL (12-25 min)
	@rm -f $(BENCH_RIVER_ENV)
	GO=$(GO) BENCHSTAT=$(BENCHSTAT) BENCH_COUNT=$(BENCH_COUNT) ./bench/run.sh $(BIN)/cq; status=$$?; \
	printf '\n### River on PostgreSQL: bench/river (figures: %s)\n\n' $(BENCH_RIVER_ENV); \
	$(BENCH_RIVER) -skip-if-down -results $(BENCH_RIVER_ENV) $(ARGS) || status=1; \
	$(CURDIR)/bench/pg-goals.sh $(abspath $(or $(BENCH_OUT),bench/out))/go.txt $(BENCH_RIVER_ENV); \
	exit $$status

# River's harness is a module of its own (bench/river/go.mod), so that River
# is never a dependency of cq and ./... (make test, lint) leaves it out.
# make bench runs it even when a part of run.sh failed, as run.sh runs every
# part, and writes its figures beside run.sh's as key=value lines (absolute:
# it runs in bench/river). Not through $(MAKE): make -n would run run.sh.
BENCH_RIVER     = cd bench/river && $(GO) run .
BENCH_RIVER_ENV = $(abspath $(or $(BENCH_OUT),bench/out))/river.env

bench-river: ## River's claim+complete and batch-insert rates on PostgreSQL (ARGS='-url postgres://… -n N'; ~10 s)
	$(BENCH_RIVER) $(ARGS)

bench-go: $(BENCHSTAT) ## only bench's Go benchmarks (internal/queue), benchstat, their goals (~2 min)
	GO=$(GO) BENCHSTAT=$(BENCHSTAT) BENCH_COUNT=$(BENCH_COUNT) BENCH_PARTS=go ./bench/run.sh

bench-e2e: build bench-bins ## only bench's end-to-end run: cq vs xargs, Go spawn ref, tsp, parallel, nq (~7 min)
	./bench/e2e.sh $(BIN)/cq

bench-maint: ## health and cleanup benchmarks over 1M-task stores (internal/maintenance, slow)
	$(GO) test -run '^$$' -bench . -benchmem -count 5 -timeout 60m ./internal/maintenance

$(BENCHSTAT):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)
	mv $(BIN)/benchstat $(BENCHSTAT)

fuzz: ## run each fuzz target for FUZZTIME (20s)
	$(GO) test -run '^$$' -fuzz '^FuzzParseSpecJSON$$' -fuzztime $(FUZZTIME) ./internal/queue
	$(GO) test -run '^$$' -fuzz '^FuzzParseDuration$$' -fuzztime $(FUZZTIME) ./internal/queue
	$(GO) test -run '^$$' -fuzz '^FuzzSpoolDrain$$' -fuzztime $(FUZZTIME) ./internal/queue

cover: ## run the tests with coverage, the CLI's subprocesses included
	$(GO) test -count=1 -coverpkg=./... -coverprofile=cover.out ./...
	$(GO) tool cover -func=cover.out | tail -1

demo: build ## build cq and run a real pipeline in a throw-away home
	./examples/scripts/demo.sh $(BIN)/cq

demo-pg: build ## the demo on PostgreSQL (the local server, or CQ_DEMO_PG_URL), in a schema dropped after
	./examples/scripts/demo-pg.sh $(BIN)/cq

clean: ## remove build output
	rm -rf $(BIN)/cq $(BIN)/floor $(BIN)/spawnref cover.out man
