# substatus — the two commands that matter: `make run` and `make test`.
SWIFT ?= swift
SWIFT_FLAGS ?= -Xswiftc -warnings-as-errors

.PHONY: run test build release deps test-deps protos bench fuzz soak fmt clean alloc-budgets-release

deps:
	@scripts/install-deps

test-deps:
	@scripts/install-deps --test

build: deps
	$(SWIFT) build $(SWIFT_FLAGS)

release: deps
	$(SWIFT) build -c release $(SWIFT_FLAGS)

## Starts substatusd on ./data with the embedded SQLite store.
run: release
	@mkdir -p data
	.build/release/substatusd --data-dir data

## Builds and runs every test (unit, interop with real peers, end to end): scripts/run-tests runs the
## suites that wait on other programs (interop peers, PostgreSQL, Chromium) beside the other local
## ones, two serial processes side by side, then the daemon's end-to-end suites in parallel.
test: test-deps
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	scripts/check-protos
	scripts/check-buf
	scripts/readme_figures.py --check
	SWIFT="$(SWIFT)" scripts/run-tests

## The allocation budgets of the release build (README "Testing"); `make test` checks the debug
## build's. Builds only substatus-alloc-budget in release (a cold release build of everything it
## needs would about double `make test`'s time).
alloc-budgets-release: test-deps
	$(SWIFT) build -c release --product substatus-alloc-budget $(SWIFT_FLAGS)
	$(SWIFT) build --build-tests $(SWIFT_FLAGS)
	SUBSTATUS_TEST_BIN_DIR="$(CURDIR)/.build/release" $(SWIFT) test --skip-build --filter SubstatusAllocBudgetTests

## Regenerates the C and Swift code for Protos/ (checked in; a test fails when it is stale).
protos: deps
	scripts/generate-protos

## Benchmarks; writes BENCHMARKS.md. `make bench COMPARE=<git ref>` measures only this build against
## that commit's, built in .build/compare/<sha> (cached), the end-to-end shapes and the transport
## interleaved in one run, and writes its block of BENCHMARKS.md's Compare section; QUICK=1: a smaller
## store and short rounds; SHAPES=elig1x20,transport: only those; NICE=-10: servers and load
## generators at that niceness on a busy machine (see README, "Comparing with an earlier commit").
bench: test-deps release
	scripts/bench $(if $(COMPARE),--compare $(COMPARE) $(if $(SHAPES),--shapes $(SHAPES)) $(if $(NICE),--nice $(NICE))) $(if $(QUICK),--quick)

## Fuzzes the parsers with libFuzzer + ASan, FUZZ_SECONDS per target (default 60); see RELIABILITY.md.
## `make test` runs the checked-in corpora through the same targets (SubstatusFuzzRegressionTests).
fuzz: deps
	scripts/fuzz

## Soak test of substatusd under mixed load, SOAK_SECONDS (default 600); see RELIABILITY.md.
soak: test-deps
	scripts/soak

fmt:
	$(SWIFT) format --in-place --recursive Sources Tests Clients

clean:
	rm -rf .build .venv
