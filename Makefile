# pullhelper — see README.md. `make test` is the CI entry point.
SHELL := /bin/bash
GO ?= go
TAGS := containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper containers_image_storage_stub
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
GOFLAGS_BUILD := -trimpath -tags "$(TAGS)" -ldflags "-s -w -X main.version=$(VERSION)"
BIN := bin/pullhelper
APT_PACKAGES := docker-registry skopeo bats bats-assert bats-support apache2-utils openssl curl python3 iproute2
BATS_FLAGS ?=

.PHONY: all deps build test test-unit test-system bench fuzz demo lint clean

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

build: $(BIN)

$(BIN): $(shell find . -name '*.go' -not -path './tests/*') go.mod go.sum
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $@ ./cmd/pullhelper

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	CGO_ENABLED=0 $(GO) vet -tags "$(TAGS)" ./...

test-unit:
	CGO_ENABLED=0 $(GO) test -tags "$(TAGS)" -count=1 ./...

test-system: build
	bats $(BATS_FLAGS) tests/

test: deps lint test-unit test-system

demo: deps build
	@bash tests/demo.sh

clean:
	rm -rf bin tests/.cache
