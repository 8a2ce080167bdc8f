# Tributary — one durable log store behind Kafka, Pub/Sub and MQTT.
# `make help` lists the targets.

SHELL := /usr/bin/env bash
GO    ?= go
# Dev tools are pinned in tools/go.mod and built into bin/tools (go tool -modfile does not
# work in workspace mode, so they are built with GOWORK=off and run from there).
TOOLS := $(CURDIR)/bin/tools
# Every Go package of the workspace, module by module (go.work lists them).
MODULES := libs proto services/storage-core services/coordinator services/kafka-gateway services/pubsub-gateway services/mqtt-bridge tests/e2e deploy
UNIT_PKGS := ./libs/... ./services/storage-core/... ./services/coordinator/... ./services/kafka-gateway/... ./services/pubsub-gateway/... ./services/mqtt-bridge/... ./deploy/...
SERVICES := storage-core coordinator kafka-gateway pubsub-gateway mqtt-bridge

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the service binaries into ./bin
	@mkdir -p bin
	@for s in $(SERVICES); do $(GO) build -o bin/$$s ./services/$$s/cmd/$$s || exit 1; done

.PHONY: up
up: build ## Start storage-core, coordinator, kafka-gateway, pubsub-gateway and mqtt-bridge locally (logs and data under ./run); SECURE=1: mTLS and auth
	@SECURE=$(SECURE) scripts/dev/up.sh

.PHONY: certs
certs: ## Create a local CA, per-service certificates and tokens under ./run/certs (make up SECURE=1 uses them)
	@scripts/dev/certs.sh

.PHONY: down
down: ## Stop the local stack started by `make up` (data under ./run is kept)
	@scripts/dev/down.sh

.PHONY: test
test: unit e2e ## Run every test: unit and in-process tests, then end-to-end tests with real clients

.PHONY: unit
unit: ## Unit and in-process integration tests (needs Postgres and NATS, as .ci/run starts them)
	$(GO) test -race -count=1 $(UNIT_PKGS)

.PHONY: e2e
e2e: ## End-to-end tests: real binaries driven by kcat, kgo/kadm and gRPC clients, in concurrent shards (E2E_SHARDS, E2E_RUN)
	GO=$(GO) scripts/ci/e2e.sh

.PHONY: e2e-franz-go
e2e-franz-go: ## franz-go's own integration tests (pkg/kgo at the go.mod version: group, KIP-848, regex) against a stack
	cd tests/e2e && TRIBUTARY_E2E_FRANZGO=1 $(GO) test -count=1 -timeout 30m -run '^TestFranzGoSuite$$' -v .

.PHONY: bench
bench: ## Kafka (share groups included), consumer-group, Pub/Sub, MQTT and log-cleaner benchmarks: our stack beside kfake / pstest / Mosquitto / dd, same run
	$(GO) run ./tests/e2e/cmd/kafkabench
	$(GO) run ./tests/e2e/cmd/groupbench
	$(GO) run ./tests/e2e/cmd/pubsubbench
	$(GO) run ./tests/e2e/cmd/mqttbench
	$(GO) run ./tests/e2e/cmd/compactbench

.PHONY: proto
proto: tools ## Regenerate Go code from proto/ (checked in)
	cd proto && PATH="$(TOOLS):$$PATH" buf lint && PATH="$(TOOLS):$$PATH" buf generate

.PHONY: proto-check
proto-check: proto ## Fail if the checked-in generated code differs from `make proto`
	@git diff --exit-code -- proto/gen || (echo "generated code is stale: run make proto and commit" >&2; exit 1)

.PHONY: tools
tools: ## Build the pinned dev tools (buf, protoc plugins, staticcheck, grpcurl) into bin/tools
	@mkdir -p $(TOOLS)
	@cd tools && GOWORK=off $(GO) build -o $(TOOLS)/ github.com/bufbuild/buf/cmd/buf google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc honnef.co/go/tools/cmd/staticcheck github.com/fullstorydev/grpcurl/cmd/grpcurl

.PHONY: lint
lint: tools ## gofmt, go vet and staticcheck over every module
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(addsuffix /...,$(addprefix ./,$(MODULES)))
	$(TOOLS)/staticcheck $(addsuffix /...,$(addprefix ./,$(MODULES)))
