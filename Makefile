# kubeboot: see README.md. `make test` is what CI runs.
SHELL := /bin/bash
GO ?= go
CACHE := $(CURDIR)/.cache
BIN := $(CURDIR)/bin
TOOLS_BIN := $(CACHE)/bin
# The real etcd and Kubernetes binaries, built by test/tools/build.sh.
K8S_BIN := $(CURDIR)/test/tools/bin
GOLANGCI_LINT_VERSION := v2.15.0
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/kubeboot/kubeboot/cmd/kubeboot/app.version=$(VERSION)
FUZZTIME ?= 10m
# The packages with golden files: those whose tests define the -update flag
# (any other package's test binary rejects it).
GOLDEN_PKGS = $(shell git grep -l 'Bool."update"' -- '*_test.go' | xargs -n1 dirname | sort -u | sed 's|^|./|')

.PHONY: build package test unit e2e conformance conformance-netpol conformance-dualstack lint golden bench fuzz binaries lab-binaries host-packages lab lab-down release clean

## build: compile kubeboot into bin/kubeboot
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/kubeboot ./cmd/kubeboot

## package: kubeboot's .deb of bin/kubeboot for this machine's architecture, bin/kubeboot.deb, which every lab machine installs with dpkg
package: build
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) $(GO) run ./cmd/kubeboot-release --deb $(BIN)/kubeboot.deb --binary $(BIN)/kubeboot --version $(VERSION)

## release: write dist/ (see docs/development.md, "Releases"): for amd64 and arm64 a tarball, a .deb and an .rpm (the binary, kubeboot-bootstrap.service, completions, man pages), an SPDX SBOM and SHA256SUMS, the same bytes on every run of one commit: SOURCE_DATE_EPOCH is the commit's time
release:
	rm -rf dist
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct) $(GO) run ./cmd/kubeboot-release --out dist --version $(VERSION)

## test: lint, the pinned binaries, unit tests and the end-to-end suite (what CI runs)
test: lint binaries unit e2e

## unit: every package's tests, including the fuzz seed corpora (machine's TestMachine boots real machines), and the pod validator's differential test against the kubelet's validation
unit:
	KUBEBOOT_BIN_DIR=$(K8S_BIN) $(GO) test -count=1 ./...
	@# kubeboot's static pod validator against the kubelet's own validation, on a generated corpus: a module of its own, since it imports k8s.io/kubernetes.
	set -o pipefail; cd test/tools/podvalidation && GOWORK=off $(GO) test -count=1 -v ./... | grep -E '^(--- |ok|FAIL)|corpus:|agreement:'

## e2e: the end-to-end suite against the real binaries and kubelet (build tag e2e), its lab tests two at a time, longest first (test/e2e/lanes_test.go; KUBEBOOT_E2E_LANES=1 runs them one at a time)
e2e: binaries
	KUBEBOOT_BIN_DIR=$(K8S_BIN) $(GO) test -count=1 -timeout 60m -parallel 32 -tags e2e -v ./test/e2e/...

## conformance: every Kubernetes conformance test (e2e.test and ginkgo v1.36.3, and the tests' images, built here) on a lab of three machines, [Serial] ones after the others; JUnit in .cache/conformance, the summary in docs/conformance.md (CONFORMANCE_FOCUS, a regular expression, narrows the tests, and the summary then goes to .cache/conformance/summary.md); outside make test
conformance: binaries
	bash test/tools/build.sh $(K8S_BIN) --conformance
	bash test/tools/build-e2e-test.sh $(K8S_BIN)
	KUBEBOOT_E2E_TEST=$(K8S_BIN)/e2e.test KUBEBOOT_CONFORMANCE_FOCUS='$(CONFORMANCE_FOCUS)' KUBEBOOT_BIN_DIR=$(K8S_BIN) \
		KUBEBOOT_CONFORMANCE_REPORTS=$(CACHE)/conformance KUBEBOOT_CONFORMANCE_SUMMARY=$(if $(CONFORMANCE_FOCUS),$(CACHE)/conformance/summary.md,$(CURDIR)/docs/conformance.md) \
		$(GO) test -count=1 -timeout 5h -tags 'e2e conformance' -v -run '^TestConformance$$' ./test/e2e/

## conformance-netpol: Kubernetes' own NetworkPolicy tests (every e2e.test v1.36.3 test labelled Feature:NetworkPolicy: [sig-network] Netpol; not the SCTP ones, Feature:SCTPConnectivity: this kernel has no SCTP sockets) on the conformance lab, which kubeboot's enforcer must pass; the summary in docs/conformance-netpol.md; outside make test
conformance-netpol: binaries
	bash test/tools/build.sh $(K8S_BIN) --conformance
	bash test/tools/build-e2e-test.sh $(K8S_BIN)
	KUBEBOOT_E2E_TEST=$(K8S_BIN)/e2e.test KUBEBOOT_CONFORMANCE_LABELS='Feature:NetworkPolicy && !Feature:SCTPConnectivity' KUBEBOOT_CONFORMANCE_FOCUS='$(CONFORMANCE_FOCUS)' KUBEBOOT_BIN_DIR=$(K8S_BIN) \
		KUBEBOOT_CONFORMANCE_REPORTS=$(CACHE)/conformance-netpol KUBEBOOT_CONFORMANCE_SUMMARY=$(if $(CONFORMANCE_FOCUS),$(CACHE)/conformance-netpol/summary.md,$(CURDIR)/docs/conformance-netpol.md) \
		$(GO) test -count=1 -timeout 5h -tags 'e2e conformance' -v -run '^TestConformance$$' ./test/e2e/

## conformance-dualstack: Kubernetes' own dual-stack tests (every e2e.test v1.36.3 test labelled Feature:IPv6DualStack; not the SCTP ones) on the conformance lab made dual-stack (as examples/dualstack.yaml: every node, pod and Service of both families); the summary in docs/conformance-dualstack.md; outside make test
conformance-dualstack: binaries
	bash test/tools/build.sh $(K8S_BIN) --conformance
	bash test/tools/build-e2e-test.sh $(K8S_BIN)
	KUBEBOOT_E2E_TEST=$(K8S_BIN)/e2e.test KUBEBOOT_CONFORMANCE_DUALSTACK=1 KUBEBOOT_CONFORMANCE_LABELS='Feature:IPv6DualStack && !Feature:SCTPConnectivity' KUBEBOOT_CONFORMANCE_FOCUS='$(CONFORMANCE_FOCUS)' KUBEBOOT_BIN_DIR=$(K8S_BIN) \
		KUBEBOOT_CONFORMANCE_REPORTS=$(CACHE)/conformance-dualstack KUBEBOOT_CONFORMANCE_SUMMARY=$(if $(CONFORMANCE_FOCUS),$(CACHE)/conformance-dualstack/summary.md,$(CURDIR)/docs/conformance-dualstack.md) \
		$(GO) test -count=1 -timeout 5h -tags 'e2e conformance' -v -run '^TestConformance$$' ./test/e2e/

## binaries: build (or reuse) the pinned etcd, Kubernetes (v1.36 and, for the upgrade test, v1.35), crictl, kube-bench, containerd, CNI plugins, pause and SeaweedFS (weed, the tests' S3 server)
binaries:
	bash test/tools/build.sh $(K8S_BIN) --with-v1.35

## lab-binaries: only the binaries the lab runs (no v1.35 set, kube-bench or SeaweedFS: only tests use them)
lab-binaries:
	bash test/tools/build.sh $(K8S_BIN) --lab

## host-packages: the Debian packages the lab needs (runc, iptables, iproute2, haproxy, nftables, whose nft the kube-proxy image holds, systemd-container and dbus, which boot the lab's machines, and what builds BusyBox and the agnhost image's tools: gcc, libc6-dev, bzip2, curl, openssl), and what checks a release (rpm, which reads the .rpm, and qemu-user-static, which runs the arm64 binary), installed only when missing
host-packages:
	@missing=; for p in runc:runc iptables:iptables ip:iproute2 haproxy:haproxy nft:nftables systemd-nspawn:systemd-container dbus-daemon:dbus \
		gcc:gcc bzip2:bzip2 curl:curl openssl:openssl rpm:rpm qemu-aarch64-static:qemu-user-static; do \
		command -v $${p%%:*} >/dev/null || [ -x /usr/sbin/$${p%%:*} ] || missing="$$missing $${p##*:}"; done; \
		[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || missing="$$missing libc6-dev"; \
	if [ -n "$$missing" ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

## lint: gofmt, go vet and golangci-lint with .golangci.yml
lint: $(TOOLS_BIN)/golangci-lint
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS_BIN)/golangci-lint run ./...

$(TOOLS_BIN)/golangci-lint:
	GOBIN=$(TOOLS_BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

## golden: regenerate every golden file under testdata/ (review the diff), then check that every test passes with them
golden:
	$(GO) test $(GOLDEN_PKGS) -update
	$(GO) test ./...

## fuzz: run each fuzz target for FUZZTIME (default 10m): the config loader, the manifest decoder, the bundle decoder and the patch applier
fuzz:
	$(GO) test -timeout 0 -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./internal/config
	$(GO) test -timeout 0 -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZTIME) ./internal/staticpod
	$(GO) test -timeout 0 -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) ./internal/bundle
	$(GO) test -timeout 0 -run '^$$' -fuzz '^FuzzApplyPatches$$' -fuzztime $(FUZZTIME) ./templates

## bench: kubeboot side by side with kubeadm, its pod network beside kube-router (build.sh --bench builds it) and the micro-benchmarks, written to docs/benchmarks.md (~100 min, estimated: the cluster jobs on lab machines ~35, the whole-cluster upgrade and CA rotation on machines ~43; raw go test -bench output for benchstat in .cache/bench)
bench: package binaries
	bash test/tools/build.sh $(K8S_BIN) --lab --bench
	$(GO) run ./test/bench -kubeboot $(BIN)/kubeboot -package $(BIN)/kubeboot.deb -bin-dir $(K8S_BIN) -go $(GO) -out docs/benchmarks.md -raw $(CACHE)/bench

## lab: bring up a lab of three machines from examples/machines.yaml: a control-plane node and two workers (one joined by kubeadm), systemd as PID 1, containerd and the kubelet as its services, kubeboot installed from its .deb
lab: package host-packages lab-binaries
	$(BIN)/kubeboot lab up --cluster examples/machines.yaml --bin-dir $(K8S_BIN) --package $(BIN)/kubeboot.deb
	@echo
	@echo "Use it:   export KUBECONFIG=/tmp/kubeboot-machines/kubeconfig; $(K8S_BIN)/kubectl get nodes"
	@echo "A node:   $(BIN)/kubeboot lab exec --cluster examples/machines.yaml w1 -- systemctl status kubelet"
	@echo "Stop it:  make lab-down"

## lab-down: remove the lab: its machines, network and files
lab-down: build
	$(BIN)/kubeboot lab down --cluster examples/machines.yaml --bin-dir $(K8S_BIN)

clean:
	rm -rf $(BIN) $(CACHE) dist
