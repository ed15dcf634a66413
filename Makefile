# cq — a durable job queue for shell pipelines, cron jobs, CI and operators.
GOLANGCI_VERSION := v2.15.0
BIN      := $(CURDIR)/bin
GOLANGCI := $(BIN)/golangci-lint-$(GOLANGCI_VERSION)
GO       ?= go
FUZZTIME ?= 20s

.DEFAULT_GOAL := help
.PHONY: help build test lint fmt bench bench-e2e fuzz cover demo clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/cq
	$(GO) build -o $(BIN)/cq ./cmd/cq

test: lint ## lint, then run every test with -race -shuffle=on
	$(GO) test -race -shuffle=on -count=1 -timeout 20m ./...

lint: $(GOLANGCI) ## run golangci-lint (installed into ./bin at a pinned version)
	$(GOLANGCI) run ./...

$(GOLANGCI):
	@mkdir -p $(BIN)
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
	mv $(BIN)/golangci-lint $(GOLANGCI)

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

bench: ## run the Go benchmarks (store, claim, cleanup and health at 1M tasks)
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./internal/...

bench-e2e: build ## cq against xargs, a Go spawn reference, tsp, GNU parallel, nq (~7 min)
	./bench/e2e.sh $(BIN)/cq

fuzz: ## run each fuzz target for $(FUZZTIME)
	$(GO) test -run '^$$' -fuzz '^FuzzParseSpecJSON$$' -fuzztime $(FUZZTIME) ./internal/queue
	$(GO) test -run '^$$' -fuzz '^FuzzParseDuration$$' -fuzztime $(FUZZTIME) ./internal/queue
	$(GO) test -run '^$$' -fuzz '^FuzzSpoolDrain$$' -fuzztime $(FUZZTIME) ./internal/queue

cover: ## run the tests with coverage, the CLI's subprocesses included
	$(GO) test -count=1 -coverpkg=./... -coverprofile=cover.out ./...
	$(GO) tool cover -func=cover.out | tail -1

demo: build ## build cq and run a real pipeline in a throw-away home
	./examples/scripts/demo.sh $(BIN)/cq

clean: ## remove build output
	rm -rf $(BIN)/cq cover.out
