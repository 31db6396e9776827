# cpilab: two commands set everything up — `make certify` and `make test`.
GO        ?= go
BIN       := bin
PKGS      := ./...
# Packages with concurrency that must stay clean under the race detector.
RACE_PKGS := ./rt/... ./cpiv2/... ./fakeiaas/... ./mbus/... ./agent/... ./director/... ./simulator/... ./testbed/... ./adversarial/... ./csi/... ./certifier/... ./realagent/...
FUZZTIME  ?= 10s
# The commit `cpilab --version` reports when the toolchain does not stamp it.
COMMIT    := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
# The version it reports when the toolchain has none (a build from a
# checkout): the tag, else the pseudo-version `go install …@COMMIT` would
# give (v0.0.0-<commit time UTC>-<commit>).
VERSION   := $(shell git describe --tags --exact-match 2>/dev/null || TZ=UTC git log -1 --abbrev=12 --date=format-local:%Y%m%d%H%M%S --format=v0.0.0-%cd-%h 2>/dev/null)

.PHONY: all build test test-steps catalog certify bench fuzz vet fmt clean interop deps agentbox

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "-X main.buildCommit=$(COMMIT) -X main.buildVersion=$(VERSION)" -o $(BIN)/cpilab ./cmd/cpilab
	$(GO) build -o $(BIN)/fakeiaas-cpi ./cmd/fakeiaas-cpi
	$(GO) build -o $(BIN)/bosh-flexvolume ./cmd/bosh-flexvolume
	$(GO) build -o $(BIN)/bosh-csi ./cmd/bosh-csi

# make test: vet, format check, unit and suite tests (with a throw-away
# PostgreSQL cluster, installed from the distribution's packages when
# missing), the catalog of buggy CPIs (each certified by the specs that can
# catch it; make catalog gives each a default run),
# race tests (-short), short fuzz. The tests comparing the Docker face with a
# real Docker daemon start a private one (scripts/dockerd.sh, docker.io from
# the distribution's packages) and skip, saying why, where none can run.
test: build vet fmt
	./scripts/postgres.sh run $(MAKE) --no-print-directory test-steps

# test-steps: the go test steps of make test, all on the one PostgreSQL
# cluster make test starts (CPILAB_TEST_POSTGRES); run make test instead.
# The catalog runs beside the unit, race and fuzz steps (scripts/test-steps.sh).
test-steps:
	@./scripts/dockerd.sh probe
	@./scripts/agentbox.sh probe
	GO="$(GO)" PKGS="$(PKGS)" RACE_PKGS="$(RACE_PKGS)" FUZZTIME=3s ./scripts/test-steps.sh

certify: build
	$(BIN)/cpilab certify

# make catalog: every bug and every legal variant of fixtures/buggycpi in a
# default certify run (make test certifies a bug whose clause lives in some
# areas with only those areas' specs and every context's setup and clean-up,
# and a legal variant that names the methods it varies with those methods'
# specs, the setup, clean-up and explore specs, and the reference table when
# a row calls them; see cmd/cpilab/catalog_test.go).
catalog: build
	CPILAB_CATALOG_FULL=1 $(GO) test -count=1 -timeout 40m -run '^TestCertifyCatalog$$' -v ./cmd/cpilab/

vet:
	$(GO) vet $(PKGS)

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files --others --exclude-standard '*.go' 2>/dev/null)); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Benchmarks print their figures; see each issue note for the targets.
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s $(PKGS)

# make interop CPI=PATH: the upstream BOSH Docker CPI on fakeiaas's Docker face, checked by the
# oracle, certified by `cpilab certify --cloud docker`, and its create_vm+attach_disk+detach_disk+delete_vm cycle benchmark (docs/docker.md).
# Without CPI (and without CPILAB_DOCKER_CPI) the tests skip, saying why.
interop: build
	CPILAB_DOCKER_CPI=$(if $(CPI),$(abspath $(CPI)),$(CPILAB_DOCKER_CPI)) $(GO) test -count=1 -v -run 'TestInterop' ./fakeiaas/dockerapi/
	CPILAB_DOCKER_CPI=$(if $(CPI),$(abspath $(CPI)),$(CPILAB_DOCKER_CPI)) $(GO) test -count=1 -v -run 'TestDocker' ./testbed/
	CPILAB_DOCKER_CPI=$(if $(CPI),$(abspath $(CPI)),$(CPILAB_DOCKER_CPI)) $(GO) test -count=1 -v -run 'TestCertifyDocker|TestCertifyCloudFlag' ./cmd/cpilab/
	CPILAB_DOCKER_CPI=$(if $(CPI),$(abspath $(CPI)),$(CPILAB_DOCKER_CPI)) $(GO) test -count=1 -run '^$$' -bench 'DockerCPICycle' -benchtime 20x ./fakeiaas/dockerapi/

# make agentbox: the upstream BOSH agent in a box (docs/agent.md): builds the
# root filesystem once (cached), then the differential test against the
# reference agent and certify --agent real, printing the box's figures.
# Without an agent binary ($CPILAB_BOSH_AGENT, bin/bosh-agent) they skip, saying why.
agentbox: build
	./scripts/agentbox.sh probe
	$(GO) test -count=1 -timeout 15m -v -run 'TestDifferentialUpstreamAgent' ./realagent/
	$(GO) test -count=1 -timeout 15m -v -run 'TestCertifyAgentReal' ./cmd/cpilab/

# Each fuzz target runs for FUZZTIME (make fuzz FUZZTIME=60s for the long run).
fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

# System tools some tests use (Chromium renders the HTML report); the tests
# call this themselves when the tool is missing.
deps:
	./scripts/install-deps.sh chromium

clean:
	rm -rf $(BIN)
