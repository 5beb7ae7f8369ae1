GO ?= go
BIN := bin

.PHONY: dev test check generate mcp-client k8s-bins s3-bins fleet build fmt vet staticcheck vuln race fuzz loadtest-ssh images manifests faketart

# dev runs the whole stack in one process on embedded defaults.
dev:
	$(GO) run ./cmd/sbx dev

# test runs every test against the real Postgres and Redis on this machine,
# a real kube-apiserver and etcd (k8s-bins), and the MCP TypeScript client
# the MCP end-to-end test drives. SBX_K8S_REQUIRED makes a missing
# apiserver fail the Kubernetes tests instead of skipping them.
K8S_TEST_ENV = SBX_K8S_BINS=$(K8S_BINS) SBX_K8S_REQUIRED=1 SBX_S3_BINS=$(S3_BINS) SBX_S3_REQUIRED=1
# The k8s provider's package runs alone, after the rest: each of its test
# pods is a real sbx-init and sshd, and beside cmd/sbx on two cores its
# pods missed their ready waits (two full runs; it passes alone).
K8S_PROVIDER_PKG := ./control/provider/k8s
test: mcp-client k8s-bins s3-bins
	$(K8S_TEST_ENV) $(GO) test -count=1 -timeout 30m $$($(GO) list ./... | grep -v '/control/provider/k8s$$')
	$(K8S_TEST_ENV) $(GO) test -count=1 -timeout 30m $(K8S_PROVIDER_PKG)

# race runs the same two steps as test under the race detector, shuffled.
race: mcp-client k8s-bins s3-bins
	$(K8S_TEST_ENV) $(GO) test -race -shuffle=on -count=1 -timeout 40m $$($(GO) list ./... | grep -v '/control/provider/k8s$$')
	$(K8S_TEST_ENV) $(GO) test -race -shuffle=on -count=1 -timeout 30m $(K8S_PROVIDER_PKG)

# fuzz runs every fuzz target of the repository (each func Fuzz* in a
# _test.go file, found afresh each run) for FUZZTIME, after its seed
# corpus (in code and testdata/fuzz/NAME, which plain go test also runs).
# A failure stops the run and leaves the input in testdata/fuzz/NAME.
FUZZTIME ?= 10s
# Minimising a new input is bounded too (FuzzRelayParity: two requests
# through SSH an input; the default 60 s stalls it).
FUZZMINTIME ?= 3s
# The fuzzing engine runs on Go 1.27.3 (the module proxy serves that
# toolchain, about 10 s to fetch once): on Go 1.26, -fuzztime's deadline
# races the workers' stop and fails a clean run with "context deadline
# exceeded" and no input (go.dev/issue/75804, fixed in 1.27). Everything
# else builds and tests on the machine's Go.
FUZZGO ?= GOTOOLCHAIN=go1.27.3 $(GO)
fuzz:
	@set -e; for f in $$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz'); do \
		for fn in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== ./$$(dirname $$f) $$fn"; \
			$(FUZZGO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME) ./$$(dirname $$f); \
		done; \
	done

# k8s-bins builds the kube-apiserver and etcd the Kubernetes tests run
# (internal/testkit/kubetest) from the versions pinned in internal/testkit/kubetest/bins,
# into a cache folder outside the repository keyed by those versions. The
# first build takes 10-40 minutes on two cores; later ones find the
# binaries and do nothing.
K8S_MOD := internal/testkit/kubetest/bins
K8S_VERSION := $(shell awk '$$1=="k8s.io/kubernetes"{print $$2}' $(K8S_MOD)/go.mod)
ETCD_VERSION := $(shell awk '$$1=="go.etcd.io/etcd/server/v3"{print $$2}' $(K8S_MOD)/go.mod)
K8S_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sbx/k8s-bins
K8S_BINS ?= $(K8S_CACHE)/kubernetes-$(K8S_VERSION)-etcd-$(ETCD_VERSION)
K8S_MINOR := $(word 2,$(subst ., ,$(K8S_VERSION)))
k8s-bins: $(K8S_BINS)/kube-apiserver $(K8S_BINS)/etcd

# -X sets the version the apiserver reports (and kubectl checks skew
# against); the module build has no git tree to take it from.
$(K8S_BINS)/kube-apiserver:
	@mkdir -p $(K8S_BINS)
	@echo "building kube-apiserver $(K8S_VERSION) into $(K8S_BINS) (first time: 10-40 min)"
	cd $(K8S_MOD) && $(GO) build -trimpath -o $@.tmp \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(K8S_MINOR)" \
		k8s.io/kubernetes/cmd/kube-apiserver
	mv $@.tmp $@

$(K8S_BINS)/etcd:
	@mkdir -p $(K8S_BINS)
	cd $(K8S_MOD) && $(GO) build -trimpath -o $@.tmp -ldflags "-s -w" go.etcd.io/etcd/server/v3
	mv $@.tmp $@

# fleet runs 2 control and 3 edge processes (the real binaries) on
# loopback with a private Redis and Postgres, kills and stops parts of it
# under traffic, and prints the fault table (go run ./loadtest fleet -h).
fleet:
	$(GO) run ./loadtest fleet $(FLEET_FLAGS)

# s3-bins builds SeaweedFS's weed, the S3-compatible server the object
# store tests run (internal/objstore/s3test), from the version pinned in
# internal/objstore/s3bins into a cache folder keyed by that version, like
# k8s-bins. GONOSUMDB: one of its dependencies (a SeaweedFS fork of the
# CockroachDB parser) is on the module proxy but not in the checksum
# database; s3bins/go.sum pins its hash instead.
S3_MOD := internal/objstore/s3bins
S3_VERSION := $(shell awk '{for (i = 1; i < NF; i++) if ($$i == "github.com/seaweedfs/seaweedfs") {print $$(i+1); exit}}' $(S3_MOD)/go.mod)
S3_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sbx/s3-bins
S3_BINS ?= $(S3_CACHE)/seaweedfs-$(S3_VERSION)
s3-bins: $(S3_BINS)/weed

$(S3_BINS)/weed:
	@mkdir -p $(S3_BINS)
	@echo "building weed $(S3_VERSION) into $(S3_BINS) (first time: several minutes)"
	cd $(S3_MOD) && GONOSUMDB=github.com/seaweedfs/cockroachdb-parser $(GO) build -trimpath -o $@.tmp -ldflags "-s -w" github.com/seaweedfs/seaweedfs/weed
	mv $@.tmp $@

build:
	mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ ./cmd/...

# faketart builds the fake of Cirrus Labs' tart CLI (internal/testkit/faketart;
# docs/faketart.md) into bin/tart, for `sbx dev --tart bin/tart` on a
# machine that is not a Mac; bin/sw_vers, the same program, is the host's
# macOS version that preflight reads beside tart.
faketart:
	mkdir -p $(BIN)
	$(GO) build -o $(BIN)/tart ./internal/testkit/faketart
	ln -sf tart $(BIN)/sw_vers

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# vuln needs the Go vulnerability database (vuln.go.dev), which this
# workplace cannot reach; run it where it can. It is not part of check.
vuln:
	$(GO) run golang.org/x/vuln/cmd/govulncheck@v1.9.0 ./...

# loadtest-ssh measures the SSH broker against a direct connection to the
# same sshd, on this machine only (see loadtest/main.go).
loadtest-ssh:
	$(GO) run ./loadtest ssh

# check is what a reviewer runs before merging.
check: fmt vet staticcheck race

# images builds the edge and control container images (multi-stage, see
# deploy/docker). IMAGE_PREFIX and TAG name them; deploy/overlays expect
# sbx-edge:dev and sbx-control:dev for the dev cluster.
IMAGE_PREFIX ?= sbx-
TAG ?= dev
DOCKER ?= docker
images:
	$(DOCKER) build -f deploy/docker/edge.Dockerfile -t $(IMAGE_PREFIX)edge:$(TAG) .
	$(DOCKER) build -f deploy/docker/control.Dockerfile -t $(IMAGE_PREFIX)control:$(TAG) .
	$(DOCKER) build -f deploy/docker/sandbox.Dockerfile -t $(IMAGE_PREFIX)sandbox:$(TAG) .

# manifests renders every kustomize overlay (what deploy/manifests_test.go checks).
manifests:
	@for o in dev production; do echo "# deploy/overlays/$$o"; kubectl kustomize deploy/overlays/$$o; done

# generate regenerates the API client from control/api/openapi.json with
# oapi-codegen, pinned in tools.mod (TestGeneratedClientIsCurrent checks
# that the checked-in client is what this produces).
generate:
	cd control/apiclient && $(GO) run -modfile=../../tools.mod github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen -config oapi-codegen.yaml ../../control/api/openapi.json

# mcp-client installs the MCP TypeScript SDK client the MCP end-to-end
# test drives (cmd/sbx/mcp_e2e_test.go), pinned by its package-lock.json.
MCP_CLIENT := cmd/sbx/testdata/mcp-client
mcp-client: $(MCP_CLIENT)/node_modules/.package-lock.json

# npm ci writes node_modules/.package-lock.json: installed again only when
# the lock file changes.
$(MCP_CLIENT)/node_modules/.package-lock.json: $(MCP_CLIENT)/package-lock.json
	cd $(MCP_CLIENT) && npm ci --no-audit --no-fund --loglevel=error
