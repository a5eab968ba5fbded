# azgate. `make help` lists the targets.
GO      ?= go
BIN     := bin/azgate
NODEBIN := bin/azgate-node
LABBIN  := bin/azgate-lab
FLEETBIN := bin/azgate-fleetnode
PREFIX  ?= /usr/local
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
export PATH := /usr/local/go/bin:$(PATH)
export GOFLAGS := -buildvcs=false

GO_SOURCES := $(shell find cmd internal -name '*.go' -not -name '*_test.go') go.mod go.sum
BPF_SOURCES := $(wildcard bpf/*.c bpf/lib/*.h)

.PHONY: help build install deb generate config-docs check-generated vet test demo demo-gslb lab-down bench bench-dataplane bench-lab bench-control bench-lb bench-fleet bench-compare bench-compare-rev fuzz fuzz-bwalloc fuzz-gslb fuzz-long clean

help:
	@echo "build            build $(BIN) (shipped), $(NODEBIN) (shipped: the edge and agent roles only), $(LABBIN) (the lab and the benchmarks) and $(FLEETBIN) (bench fleet's edge and agent processes)"
	@echo "install          install the four in $(DESTDIR)$(PREFIX)/bin (azgate-lab runs the azgate, azgate-node and azgate-fleetnode beside it)"
	@echo "deb              the Debian package in bin/ (dpkg-deb: binary, systemd units, man pages; DEB_VERSION=...)"
	@echo "generate         rebuild the BPF objects (clang) and their Go bindings"
	@echo "check-generated  fail if the committed BPF objects differ from the sources"
	@echo "config-docs      write docs/config.md and packaging/etc/azgate/ROLE.yaml from the roles' flags"
	@echo "test             vet, check-generated and every test (as root: BPF, namespaces, etcd)"
	@echo "demo             lab up + lab demo, then lab gslb demo (as root)"
	@echo "demo-gslb        lab gslb demo: the three-region GSLB and pathd lab (as root)"
	@echo "bench            every benchmark suite (results go in BENCHMARKS.md)"
	@echo "bench-fleet      edge fleets: etcd-cluster drift, connection sync, failover gaps (as root)"
	@echo "bench-compare    per-packet suites, this build against BASE's objects (BASE=git revision, default HEAD)"
	@echo "bench-compare-rev  the same against BASE's own build, alternated (when map layouts changed)"
	@echo "fuzz             long fuzzing runs (FUZZTIME=10m)"
	@echo "fuzz-bwalloc     the bandwidth allocator's fuzzers (BWFUZZTIME=15s)"
	@echo "fuzz-gslb        issue 11's fuzzers: DNS, GSLB objects, pathd, GeoIP (GSLBFUZZTIME=30s)"
	@echo "fuzz-long        every XDP program at scale: FUZZ_PACKETS (default 10M) mutated and random frames, FUZZ_SEED to replay (as root)"

build: $(BIN) $(NODEBIN) $(LABBIN) $(FLEETBIN)

$(BIN): $(GO_SOURCES)
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/azgate

# The node roles (edge, agent) only: the same source built with the node
# tag, without the controller, the etcd server, DNS and the CLI
# (cmd/azgate/node.go); their units run it, and so does the lab.
$(NODEBIN): $(GO_SOURCES)
	$(GO) build -tags node -ldflags "-X main.version=$(VERSION)" -o $(NODEBIN) ./cmd/azgate

# The lab and the benchmarks: apart, so that azgate links none of their
# code (cmd/azgate's TestShippedDeps); the lab runs bin/azgate beside it.
$(LABBIN): $(GO_SOURCES)
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(LABBIN) ./cmd/azgate-lab

# bench fleet's child processes (edges and agents on the data-plane fakes):
# azgate-node's code plus the two child commands (cmd/azgate/fleetnode.go),
# without the lab's, so that their memory is a node binary's
# (TestFleetNodeDeps); azgate-lab runs the one beside it. Not shipped.
$(FLEETBIN): $(GO_SOURCES)
	$(GO) build -tags node,fleetnode -ldflags "-X main.version=$(VERSION)" -o $(FLEETBIN) ./cmd/azgate

install: build
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(BIN) $(NODEBIN) $(LABBIN) $(FLEETBIN) $(DESTDIR)$(PREFIX)/bin/

# The Debian package (docs/deploy.md): scripts/mkdeb.sh, from this
# checkout; packaging/ holds the units and the maintainer scripts.
deb:
	GO=$(GO) scripts/mkdeb.sh bin

generate:
	cd internal/dataplane && $(GO) generate ./...

ROLES := controller edge agent bwmgr gslb pathd prober announce

# The configuration reference and the default config files, from the
# roles' flags (cmd/azgate/configdocs.go; TestConfigDocsCurrent).
config-docs:
	$(GO) run ./cmd/azgate docs config > docs/config.md
	mkdir -p packaging/etc/azgate
	for r in $(ROLES); do $(GO) run ./cmd/azgate docs etc $$r > packaging/etc/azgate/$$r.yaml || exit 1; done

check-generated: generate
	@git diff --exit-code --stat -- internal/dataplane || \
		{ echo "the committed BPF objects do not match bpf/: run make generate and commit"; exit 1; }

vet:
	@test -z "$$(gofmt -l cmd internal test)" || { gofmt -l cmd internal test; echo "gofmt needed"; exit 1; }
	$(GO) vet ./...

test: vet check-generated build
	$(GO) test -count=1 -timeout 25m -p 2 ./...

demo: build
	-./$(LABBIN) lab down >/dev/null 2>&1
	./$(LABBIN) lab up
	./$(LABBIN) lab demo
	-./$(LABBIN) lab gslb down >/dev/null 2>&1
	./$(LABBIN) lab gslb demo

demo-gslb: build
	-./$(LABBIN) lab gslb down >/dev/null 2>&1
	./$(LABBIN) lab gslb demo

lab-down: build
	./$(LABBIN) lab down

bench: bench-dataplane bench-lab bench-control bench-lb bench-fleet

bench-dataplane: build
	./$(LABBIN) bench dataplane

bench-lab: build
	./$(LABBIN) bench lab

bench-control: build
	./$(LABBIN) bench control

bench-lb: build
	./$(LABBIN) bench lb

# Fleets (issue 8): control-plane drift on a 3-member etcd cluster,
# connection sync, failover gaps by cause in a lab of its own (prefix azb-).
bench-fleet: build
	./$(LABBIN) bench fleet

# Before/after in one run: the data-plane and load-balancer per-packet paths
# timed with this build's objects and with BASE's, interleaved.
BASE ?= HEAD
bench-compare: build
	rm -rf bin/baseline-objects
	scripts/baseline-objects.sh $(BASE) bin/baseline-objects
	./$(LABBIN) bench dataplane --rounds 9 --baseline-objects bin/baseline-objects
	./$(LABBIN) bench lb --rounds 9 --conn-table 0 --lab=false --baseline-objects bin/baseline-objects

# The same when BASE's maps have another layout: BASE's own build and this
# one, run alternately (RUNS times), compared by name.
RUNS ?= 3
bench-compare-rev: build
	scripts/bench-compare-rev.sh $(BASE) $(RUNS)

FUZZTIME ?= 10m
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzEdge -fuzztime $(FUZZTIME) ./internal/dataplane
	$(GO) test -run '^$$' -fuzz FuzzAgentGuest -fuzztime $(FUZZTIME) ./internal/dataplane
	$(GO) test -run '^$$' -fuzz FuzzParseDocument -fuzztime $(FUZZTIME) ./internal/model
	$(GO) test -run '^$$' -fuzz FuzzBuild -fuzztime $(FUZZTIME) ./internal/maglev
	$(MAKE) fuzz-bwalloc BWFUZZTIME=$(FUZZTIME)
	$(MAKE) fuzz-gslb GSLBFUZZTIME=$(FUZZTIME)

# Issue 11's fuzzers: the DNS message path, the GSLB objects' and pathd's
# bodies, Redis rows read back, measurements, GeoIP files, check URLs.
GSLBFUZZTIME ?= 30s
fuzz-gslb:
	$(GO) test -run '^$$' -fuzz FuzzHandler -fuzztime $(GSLBFUZZTIME) ./internal/gslb/dnsserver
	$(GO) test -run '^$$' -fuzz FuzzDNSBodies -fuzztime $(GSLBFUZZTIME) ./internal/model
	$(GO) test -run '^$$' -fuzz FuzzReports -fuzztime $(GSLBFUZZTIME) ./internal/pathd
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(GSLBFUZZTIME) ./internal/pathd/hopstore
	$(GO) test -run '^$$' -fuzz FuzzMeasurement -fuzztime $(GSLBFUZZTIME) ./internal/pathcomp
	$(GO) test -run '^$$' -fuzz FuzzReload -fuzztime $(GSLBFUZZTIME) -fuzzminimizetime 1x -parallel 1 ./internal/geo
	$(GO) test -run '^$$' -fuzz FuzzParseCheck -fuzztime $(GSLBFUZZTIME) ./internal/announce

# The bandwidth allocator's fuzzers, short by default (a CI step's worth);
# plain `go test` runs their seeds.
BWFUZZTIME ?= 15s
fuzz-bwalloc:
	$(GO) test -run '^$$' -fuzz FuzzAllocate -fuzztime $(BWFUZZTIME) ./internal/bwalloc
	$(GO) test -run '^$$' -fuzz FuzzSplitHosts -fuzztime $(BWFUZZTIME) ./internal/bwalloc

# Fuzzing at scale (issue 9 part 7): the TestScaleFuzz tests of
# internal/dataplane with FUZZ_PACKETS frames in all (60 % xdp_edge, 20 %
# each agent program); the seed is logged, FUZZ_SEED replays it.
FUZZ_PACKETS ?= 10000000
FUZZ_SEED ?=
fuzz-long:
	AZG_FUZZ_PACKETS=$(FUZZ_PACKETS) AZG_FUZZ_SEED=$(FUZZ_SEED) $(GO) test -count=1 -timeout 3h -v -run '^TestScaleFuzz' ./internal/dataplane

clean:
	rm -rf bin
