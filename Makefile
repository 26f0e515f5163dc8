# The two commands that matter: `make run` and `make test`.
GO       ?= go
GOFLAGS  ?=
# Debian packages the tests need, as binary:package.
TEST_DEPS = redis-server:redis-server clickhouse-server:clickhouse-server kcat:kcat chromium:chromium chromedriver:chromium-driver

.PHONY: run test deps vet build bench fuzz clean

## run: the whole system in one process on the embedded default (Kafka, Redis
## embedded; data in ./data; HTTP on 127.0.0.1:8080, Kafka on 127.0.0.1:9092)
run:
	$(GO) run ./cmd/chatd dev

## test: everything that gates a change; installs the servers the tests start
test: deps vet
	$(GO) test $(GOFLAGS) -count=1 -timeout 30m ./...

## deps: install redis-server, clickhouse-server, kcat and chromium from Debian's packages when missing
deps:
	@missing=""; for d in $(TEST_DEPS); do bin=$${d%%:*}; pkg=$${d##*:}; \
	  command -v $$bin >/dev/null 2>&1 || [ -x /usr/sbin/$$bin ] || missing="$$missing $$pkg"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" != 0 ]; then echo "need root to apt-get install$$missing; run: sudo make deps" >&2; exit 1; fi; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

vet:
	$(GO) vet ./...

build:
	$(GO) build -o bin/ ./cmd/...

## bench: the benchmarks of BENCHMARKS.md
bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 1x ./consumers ./store
	$(GO) test -run '^$$' -bench . ./schema ./producers
	$(GO) test -run '^$$' -bench 'RebuildAcks|Backfill' -benchtime 1x -timeout 30m ./cmd/chatctl

## fuzz: each decoder fuzzed for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	for f in FuzzDecodeMessage FuzzDecodeAck FuzzDecodeReceipt FuzzDecodeMember FuzzRoundTripMessage; do \
	  $(GO) test ./schema -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done
	$(GO) test ./cmd/chatctl -run '^$$' -fuzz '^FuzzRecordJSON$$' -fuzztime $(FUZZTIME)

clean:
	rm -rf bin data

## bench-e2e, bench-idle: chatbench against a fresh `chatd dev` (temporary data
## dir, ports chosen by the kernel): scenarios (1) and (4) of BENCHMARKS.md.
## Override the load with BENCH_E2E_ARGS / BENCH_IDLE_ARGS; the JSON results
## and chatd's log stay in the /tmp/chatbench.* directory the run names.
BENCH_E2E_ARGS  ?= -groups 20 -group-size 50 -rate 1000 -duration 30s -warmup 5s
BENCH_IDLE_ARGS ?= -idle 10000

# bench_with_chatd builds chatd and chatbench, starts `chatd dev`, runs
# chatbench with $(1) against it and stops chatd, whatever the outcome.
define bench_with_chatd
	@set -e; tmp=$$(mktemp -d /tmp/chatbench.XXXXXX); \
	$(GO) build -o $$tmp/ ./cmd/chatd ./cmd/chatbench; \
	CHAT_DATA_DIR=$$tmp/data CHAT_HTTP_ADDR=127.0.0.1:0 CHAT_KAFKA_LISTEN=127.0.0.1:0 \
	  $$tmp/chatd dev >$$tmp/chatd.log 2>&1 & pid=$$!; \
	trap 'kill $$pid 2>/dev/null; wait $$pid 2>/dev/null; rm -rf $$tmp/data $$tmp/chatd $$tmp/chatbench' EXIT; \
	addr=; for i in $$(seq 150); do \
	  addr=$$(sed -n 's/.*msg="serving HTTP".* addr=\([0-9.:]*\).*/\1/p' $$tmp/chatd.log); \
	  [ -n "$$addr" ] && break; sleep 0.2; done; \
	[ -n "$$addr" ] || { cat $$tmp/chatd.log; echo "chatd dev did not start" >&2; exit 1; }; \
	echo "chatd dev: pid $$pid, http://$$addr; log and results in $$tmp"; \
	$$tmp/chatbench -url http://$$addr -admin-token-file $$tmp/data/admin-token -pid $$pid -json $$tmp/result.json $(1)
endef

.PHONY: bench-e2e bench-idle
bench-e2e:
	$(call bench_with_chatd,$(BENCH_E2E_ARGS))

bench-idle:
	$(call bench_with_chatd,$(BENCH_IDLE_ARGS))

## chaos: the fault-injection run of RELIABILITY.md for DURATION (default 2m):
## every process killed and restarted, Redis wiped, ClickHouse stopped 30 s,
## clients killed and cut mid-frame, poison records; then the verdict. The
## JSON result goes to CHAOS_JSON (default chaos-result.json).
DURATION   ?= 2m
CHAOS_JSON ?= chaos-result.json
.PHONY: chaos
chaos: deps
	$(GO) run ./cmd/chatchaos -duration $(DURATION) -json $(CHAOS_JSON)
