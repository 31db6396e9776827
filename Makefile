# cpilab: two commands set everything up — `make certify` and `make test`.
GO        ?= go
BIN       := bin
PKGS      := ./...
# Packages with concurrency that must stay clean under the race detector.
RACE_PKGS := ./rt/... ./cpiv2/... ./fakeiaas/... ./mbus/... ./agent/... ./director/... ./simulator/... ./testbed/...
FUZZTIME  ?= 10s

.PHONY: all build test certify bench fuzz vet fmt clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/cpilab ./cmd/cpilab
	$(GO) build -o $(BIN)/fakeiaas-cpi ./cmd/fakeiaas-cpi

# make test: vet, format check, unit and suite tests (with a throw-away
# PostgreSQL cluster, installed from the distribution's packages when
# missing), race tests, short fuzz.
test: build vet fmt
	./scripts/postgres.sh run $(GO) test -count=1 $(PKGS)
	$(GO) test -count=1 -race $$($(GO) list $(RACE_PKGS) 2>/dev/null)
	$(MAKE) fuzz FUZZTIME=3s

certify: build
	$(BIN)/cpilab certify

vet:
	$(GO) vet $(PKGS)

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files --others --exclude-standard '*.go' 2>/dev/null)); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Benchmarks print their figures; see each issue note for the targets.
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 2s $(PKGS)

# Each fuzz target runs for FUZZTIME (make fuzz FUZZTIME=60s for the long run).
fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

clean:
	rm -rf $(BIN)
