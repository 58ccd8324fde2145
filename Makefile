# pullhelper — see README.md. `make test` is the CI entry point.
SHELL := /bin/bash
comma := ,
GO ?= go
TAGS := containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
GOFLAGS_BUILD := -trimpath -ldflags "$(LDFLAGS)"
BIN := bin/pullhelper
# The tests' compromised-child build (reexec/hostile*.go); never shipped.
HOSTILE_BIN := bin/pullhelper-hostile
# Each binary's child-only binary (cmd/pullhelper-child) goes beside it, as
# NAME-child: the parent runs it as the pull child when it is that build
# (its Go build ID is written into the parent) and root's (reexec/childexe.go).
SOURCES = $(shell find . -name '*.go' -not -path './tests/*') go.mod go.sum
HOSTILE_TAGS := -tags=$(subst $(eval) ,$(comma),$(TAGS) pullhelper_hostile)
# build_parent EXTRA: pullhelper at $@ (go build flags EXTRA), the Go build ID
# of its child-only binary $@-child written into it.
build_parent = id=$$($(GO) tool buildid $@-child) && $(GO) build $(1) -trimpath -ldflags "$(LDFLAGS) -X github.com/pullhelper/pullhelper/reexec.childBuildID=$$id" -o $@ ./cmd/pullhelper
# Every go command (build, vet, test) sees the same tags and no cgo.
export CGO_ENABLED := 0
export GOFLAGS := -tags=$(subst $(eval) ,$(comma),$(TAGS))
APT_PACKAGES := docker-registry skopeo time bats bats-assert bats-support apache2-utils openssl curl python3 iproute2 dnsmasq-base util-linux containerd podman busybox-static runc go-md2man groff-base containernetworking-plugins
# crictl (cri-tools) for the containerd compatibility tests, from the Go module proxy.
CRICTL := tests/.cache/bin/crictl
CRICTL_VERSION := v1.34.0
# containerd 2.x (the daemon, its ctr and containerd-shim-runc-v2, so that a
# test can ctr run a pulled image) for the containerd:REF tests against 2.x,
# from the Go module proxy, into a versioned directory (tests/helpers.bash
# PH_CONTAINERD2_VERSION names it too).
CONTAINERD2_VERSION := v2.4.2
CONTAINERD2 := tests/.cache/bin/containerd-$(CONTAINERD2_VERSION)/containerd
# critest (cri-tools' CRI validation suite, a Go test binary) for
# tests/155-critest.bats, built from tests/critest/go.mod (its own module:
# cri-tools stays out of pullhelper's go.mod) into a versioned name.
CRITEST_VERSION := v1.37.0
CRITEST := tests/.cache/bin/critest-$(CRITEST_VERSION)
# crane for make bench (crane pull --format oci), from the Go module proxy.
CRANE := tests/.cache/bin/crane
CRANE_VERSION := v0.22.1
# staticcheck and deadcode for make lint, pinned, from the Go module proxy.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := tests/.cache/bin/staticcheck-$(STATICCHECK_VERSION)
XTOOLS_VERSION := v0.52.0
DEADCODE := tests/.cache/bin/deadcode-$(XTOOLS_VERSION)
BATS_FLAGS ?=

.PHONY: all deps build build-hostile man test test-unit test-fuzz test-system test-vm test-vm-systemd bench fuzz demo lint clean

all: build

# deps: install what is missing (apt packages, Go modules); quick when nothing is.
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		if [ "$$(id -u)" != 0 ]; then echo "make deps: need root to apt-get install:$$missing" >&2; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@$(GO) mod download
	@test -x $(CRICTL) || { echo "building crictl $(CRICTL_VERSION)"; GOBIN=$(CURDIR)/tests/.cache/bin GOFLAGS= CGO_ENABLED=0 $(GO) install sigs.k8s.io/cri-tools/cmd/crictl@$(CRICTL_VERSION); }
	@test -x $(CRITEST) || { echo "building critest $(CRITEST_VERSION)"; d=$$(mktemp -d) && (cd tests/critest && GOFLAGS=-mod=readonly CGO_ENABLED=0 $(GO) test -c -o $$d/critest sigs.k8s.io/cri-tools/cmd/critest) && mkdir -p $(dir $(CRITEST)) && mv $$d/critest $(CRITEST) && rmdir $$d; }
	@test -x $(STATICCHECK) || { echo "building staticcheck $(STATICCHECK_VERSION)"; d=$$(mktemp -d) && GOBIN=$$d GOFLAGS= CGO_ENABLED=0 $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) && mkdir -p $(dir $(STATICCHECK)) && mv $$d/staticcheck $(STATICCHECK) && rmdir $$d; }
	@test -x $(DEADCODE) || { echo "building deadcode $(XTOOLS_VERSION)"; d=$$(mktemp -d) && GOBIN=$$d GOFLAGS= CGO_ENABLED=0 $(GO) install golang.org/x/tools/cmd/deadcode@$(XTOOLS_VERSION) && mkdir -p $(dir $(DEADCODE)) && mv $$d/deadcode $(DEADCODE) && rmdir $$d; }
	@test -x $(CONTAINERD2) -a -x $(dir $(CONTAINERD2))ctr -a -x $(dir $(CONTAINERD2))containerd-shim-runc-v2 || { echo "building containerd, ctr and containerd-shim-runc-v2 $(CONTAINERD2_VERSION)"; GOBIN=$(CURDIR)/$(dir $(CONTAINERD2)) GOFLAGS= CGO_ENABLED=0 $(GO) install github.com/containerd/containerd/v2/cmd/containerd@$(CONTAINERD2_VERSION) github.com/containerd/containerd/v2/cmd/ctr@$(CONTAINERD2_VERSION) github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$(CONTAINERD2_VERSION); }

build: $(BIN)

$(BIN)-child: $(SOURCES)
	$(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/pullhelper-child

$(BIN): $(BIN)-child $(SOURCES)
	$(call build_parent,)

# build-hostile: the test-only binary whose child runs $$PULLHELPER_HOSTILE
# actions after the privilege drop (tests/*.bats attacks; never released).
build-hostile: $(HOSTILE_BIN)

$(HOSTILE_BIN)-child: $(SOURCES)
	$(GO) build $(HOSTILE_TAGS) $(GOFLAGS_BUILD) -o $@ ./cmd/pullhelper-child

$(HOSTILE_BIN): $(HOSTILE_BIN)-child $(SOURCES)
	$(call build_parent,$(HOSTILE_TAGS))

# man: the man pages, rendered from docs/NAME.SECTION.md (go-md2man's
# markdown) into man/ (generated, not checked in); a page groff warns about
# (-ww: every warning) fails the target.
MAN_PAGES := $(patsubst docs/%.md,man/%,$(wildcard docs/*.[1-8].md))
man: $(MAN_PAGES)

man/%: docs/%.md
	@mkdir -p man
	go-md2man -in $< -out $@
	@w=$$(groff -man -ww -z $@ 2>&1); if [ -n "$$w" ]; then echo "$@: groff warnings:" >&2; echo "$$w" >&2; rm -f $@; exit 1; fi

# lint: gofmt, go vet, staticcheck (both builds) and deadcode: a function
# nothing reaches from the binary, its test build (bin/pullhelper-hostile)
# or the tests fails it unless it is listed in .ci/deadcode-allow (the
# client's public API, which agents call).
lint:
	@test -x $(STATICCHECK) -a -x $(DEADCODE) || $(MAKE) --no-print-directory deps
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet $(HOSTILE_TAGS) ./reexec/
	$(STATICCHECK) ./...
	$(STATICCHECK) $(HOSTILE_TAGS) ./reexec/ ./dest/
	@raw=$$(GOFLAGS= $(DEADCODE) -test -tags $(subst $(eval) ,$(comma),$(TAGS) pullhelper_hostile) -f '{{range .Funcs}}{{$$.Path}}.{{.Name}}{{"\n"}}{{end}}' ./...) || { echo "$$raw"; exit 1; }; \
	out=$$(printf '%s\n' "$$raw" | sed 's,^github.com/pullhelper/pullhelper/,,' | grep -v -x -F -f <(sed -e 's/[[:space:]]*#.*//' -e '/^$$/d' .ci/deadcode-allow) || true); \
	if [ -n "$$out" ]; then echo "deadcode: unreachable from the binary and the tests (remove it, or list it in .ci/deadcode-allow with the reason):"; echo "$$out"; exit 1; fi

test-unit:
	$(GO) test -count=1 ./...

test-system: build build-hostile
	bats $(BATS_FLAGS) tests/

# test: everything CI runs (about 12 minutes here): lint, the man pages, Go
# unit tests, the bats system tests on this host, the cgroup v2 proofs in a
# QEMU guest and the systemd driver's in a second one.
test: deps lint man test-unit test-fuzz test-system test-vm test-vm-systemd

# bench: pullhelper against the owners' tools per destination kind, as ratios:
# oci: (isolated, --no-isolation) against skopeo, crane and the durable floor
# (ROUNDS, default 7); containers-storage: against skopeo copy and containerd:
# against ctr images pull (STORE_ROUNDS, 5); the targets of issue 26 met or
# not; about 3 minutes, at most 10. Tables on stdout, details in
# bench/results.json; see README "Performance".
bench: deps build
	@test -x $(CRANE) || { echo "building crane $(CRANE_VERSION)"; GOBIN=$(CURDIR)/tests/.cache/bin GOFLAGS= CGO_ENABLED=0 $(GO) install github.com/google/go-containerregistry/cmd/crane@$(CRANE_VERSION); }
	@bash bench/bench.sh

# FUZZ_TARGETS: every parser's fuzz target as package:Target. go test can
# fuzz one target per invocation, so the fuzz targets loop over them; plain
# `go test ./...` (test-unit) already runs each target's seed corpus.
FUZZ_TARGETS := \
	policy:FuzzParse policy:FuzzUnits \
	auth:FuzzContainersAuthFile auth:FuzzDockerConfigJSON auth:FuzzDockercfg \
	auth:FuzzPullSecret auth:FuzzNodeDockerConfig auth:FuzzKubeletAuthField \
	auth:FuzzContainerdAuth hosts:FuzzContainerdConfig hosts:FuzzHostsTOML \
	auth:FuzzProviderConfig auth:FuzzProviderResponse auth:FuzzServiceAccountToken \
	dnsconf:FuzzBuild dnsconf:FuzzResolvConf dnsconf:FuzzKubeletConfig \
	internal/regpattern:FuzzParse pipeline:FuzzResolveImage \
	registry:FuzzParseChallenges registry:FuzzResponseError registry:FuzzHeaderValues \
	reexec:FuzzReadLine reexec:FuzzChildMessages reexec:FuzzCheckShape dest/target:FuzzIsHex

# fuzz: every target of FUZZ_TARGETS with random input for FUZZTIME each
# (default 30s; about 13 minutes in all). A crasher is written to the
# package's testdata/fuzz/TARGET/; the run goes on and fails at the end.
FUZZTIME ?= 30s
FUZZMINIMIZE ?= 60s
fuzz:
	@failed=""; for pt in $(FUZZ_TARGETS); do \
		pkg=$${pt%%:*}; target=$${pt#*:}; \
		echo "fuzz: ./$$pkg $$target for $(FUZZTIME)"; \
		$(GO) test -run='^$$' -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=$(FUZZMINIMIZE) ./$$pkg || failed="$$failed $$pt"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed" >&2; exit 1; fi

# test-fuzz: the short fuzzing run of CI: a fixed number of inputs per
# target (FUZZTIME_CI, an iteration count, not a duration: a duration ends
# with a deadline that can fall inside a minimization and fail the run by
# timing), and a bounded minimization.
FUZZTIME_CI ?= 1000x
test-fuzz:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_CI) FUZZMINIMIZE=100x

demo: deps build
	@bash tests/demo.sh

clean:
	rm -rf bin man tests/.cache

# test-vm: the cgroup v2 proofs (CLONE_INTO_CGROUP, cpu.max, memory.max/high,
# io.max on buffered writes, pids.max, cgroup.kill, usage) in a QEMU guest
# booting Debian's kernel with a busybox initramfs; see tests/vm/run.sh.
.PHONY: test-vm
test-vm: deps build
	bash tests/vm/run.sh

# test-vm-systemd: the systemd cgroup driver's proofs (the per-pull transient
# scope in its slice with its limits as systemd properties and cgroup files,
# usage, kill on SIGTERM, removal, --cgroup joining a pod's scope and slice)
# in a QEMU guest whose PID 1 is Debian's systemd, on a root filesystem built
# with mmdebstrap and cached in tests/.cache/vm-systemd; about 3 minutes
# (one more to build the root filesystem); see tests/vm/systemd/.
test-vm-systemd: deps build
	bash tests/vm/run.sh --systemd
