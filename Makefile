# kubeboot: see README.md. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
CACHE := $(CURDIR)/.cache
BIN := $(CURDIR)/bin
TOOLS_BIN := $(CACHE)/bin
GOLANGCI_LINT_VERSION := v2.15.0
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/kubeboot/kubeboot/cmd/kubeboot/app.version=$(VERSION)
FUZZTIME ?= 10m

.PHONY: build test unit e2e lint golden bench fuzz binaries lab clean

## build: compile kubeboot into bin/kubeboot
build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/kubeboot ./cmd/kubeboot

## test: lint, unit tests and the end-to-end suite (what CI runs)
test: lint unit e2e

## unit: every package's tests, including the fuzz seed corpora
unit:
	$(GO) test -count=1 ./...

## e2e: the end-to-end suite against real binaries (build tag e2e)
e2e:
	$(GO) test -count=1 -tags e2e ./test/e2e/...

## lint: gofmt, go vet and golangci-lint with .golangci.yml
lint: $(TOOLS_BIN)/golangci-lint
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS_BIN)/golangci-lint run ./...

$(TOOLS_BIN)/golangci-lint:
	GOBIN=$(TOOLS_BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

## golden: regenerate every golden file under testdata/ (review the diff)
golden:
	$(GO) test ./... -update >/dev/null || true
	$(GO) test ./...

## fuzz: run each fuzz target for FUZZTIME (default 10m)
fuzz:
	$(GO) test -timeout 0 -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./config

## bench: micro-benchmarks (benchstat-friendly output)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 5 ./... | tee $(CACHE)/bench.txt

## lab: bring up a real local control plane (not available yet: see README)
lab:
	@echo "make lab needs the lab runtime and the e2e binaries (issue 6), which have not landed yet." >&2; exit 1

clean:
	rm -rf $(BIN) $(CACHE)
