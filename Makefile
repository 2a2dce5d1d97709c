# ckpt: checkpoint/restore for Linux processes.
GO      ?= go
BIN     := bin
GOFLAGS ?=
TESTTIMEOUT ?= 10m

.PHONY: all build test test-mpinodes demo demo-group deps vet fuzz bench cover clean mpi-soak

all: build

build:
	$(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/...

# Everything the tests need on a fresh machine (run as root).
deps:
	@command -v gcc >/dev/null && command -v python3 >/dev/null && command -v redis-server >/dev/null && \
		command -v redis-cli >/dev/null && command -v ip >/dev/null && command -v unshare >/dev/null && test -e /usr/lib/x86_64-linux-gnu/libc.a && \
		command -v psql >/dev/null && command -v sqlite3 >/dev/null && command -v tmux >/dev/null && command -v script >/dev/null && test -e /usr/include/sqlite3.h && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && \
		command -v mpicc.mpich >/dev/null && command -v mpiexec.hydra >/dev/null && command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null && command -v pgrep >/dev/null && command -v nginx >/dev/null || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y gcc libc6-dev python3 redis-server redis-tools iproute2 util-linux postgresql sqlite3 libsqlite3-dev tmux bsdutils \
			mpich libmpich-dev openmpi-bin libopenmpi-dev procps nginx-light)

vet:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	$(GO) vet ./...

test: deps build vet
	$(GO) test -count=1 -timeout $(TESTTIMEOUT) ./...

demo: build
	$(BIN)/ckpt-reaper exec -- bash scripts/demo.sh

# A job on 3 namespace nodes: group checkpoint with parity, then migration.
demo-group: build
	bash scripts/demo-group.sh

# The MPICH jobs over namespace nodes, through MPI_Finalize (make test
# takes their results and kills them: see end in test/e2e/mpinodes_mpi_test.go).
test-mpinodes: deps build
	CKPT_MPI_NODES=1 $(GO) test -count=1 -v -run 'TestMPIJobOverNodes|TestMPIJobLauncherLost' ./test/e2e

# Short fuzz runs of every parser.
fuzz:
	$(GO) test ./pkg/image -run '^$$' -fuzz FuzzReader -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/rewrite -run '^$$' -fuzz FuzzParse -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/parity -run '^$$' -fuzz FuzzDecodeHeader -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/coord -run '^$$' -fuzz FuzzParseMember -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/proc -run '^$$' -fuzz '^FuzzParseStatTail$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/proc -run '^$$' -fuzz '^FuzzParseStatus$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/proc -run '^$$' -fuzz '^FuzzParseGroups$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/proc -run '^$$' -fuzz '^FuzzParseLimits$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/proc -run '^$$' -fuzz '^FuzzParseSmaps$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/proc -run '^$$' -fuzz '^FuzzParseFDInfo$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/proc -run '^$$' -fuzz '^FuzzParseTimers$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/proc -run '^$$' -fuzz '^FuzzParseSysVIPC$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/proc -run '^$$' -fuzz '^FuzzParseNUMAMaps$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/sockets -run '^$$' -fuzz '^FuzzParseNetPeer$$' -fuzztime 30s -fuzzminimizetime 10x
	$(GO) test ./pkg/fdkind -run '^$$' -fuzz '^FuzzParseLockLine$$' -fuzztime 30s -fuzzminimizetime 10x

# Coverage per package: unit and in-process tests alone (go test -short),
# then the end-to-end tests through commands built for coverage.
cover: deps
	$(GO) test -short -count=1 -cover ./pkg/... ./internal/... ./cmd/...
	rm -rf .cover && mkdir -p .cover/e2e
	GOCOVERDIR=$(CURDIR)/.cover/e2e $(GO) test -count=1 -timeout $(TESTTIMEOUT) ./test/e2e
	$(GO) tool covdata percent -i .cover/e2e

# The MPI soak: every program of testdata/mpi with MPICH (default and over
# TCP) and Open MPI, 5 runs of 10 dump-and-restore and 10 --leave-running
# cycles each (make test runs a short version of TestMPI).
mpi-soak: deps build
	CKPT_MPI_SOAK=1 $(GO) test -count=1 -timeout 3h -run '^TestMPI$$' -v ./test/e2e

bench: build
	$(GO) test ./test/bench -run '^$$' -bench . -benchtime 1x -timeout 30m

clean:
	rm -rf $(BIN)
