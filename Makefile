# The two commands that matter: `make run` and `make test`.
GO       ?= go
GOFLAGS  ?=
# Debian packages the tests need, as binary:package.
TEST_DEPS = redis-server:redis-server clickhouse-server:clickhouse-server kcat:kcat chromium:chromium chromedriver:chromium-driver

.PHONY: run test deps vet build bench fuzz clean

## run: the whole system in one process on the embedded default (Kafka, Redis
## embedded; data in ./data; HTTP on 127.0.0.1:8080, Kafka on 127.0.0.1:9092)
run:
	$(GO) build -o bin/chatd ./cmd/chatd
	exec bin/chatd dev

## test: everything that gates a change; installs the servers the tests start
test: deps vet
	$(GO) test $(GOFLAGS) -count=1 -timeout 30m ./...
	@echo "every benchmark once, so that none breaks unseen:"
	$(GO) test $(GOFLAGS) -count=1 -run '^$$' -bench . -benchtime 1x -timeout 15m ./...

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
	$(GO) test -run '^$$' -bench 'Pushes' -benchtime 500000x ./gateway
	$(GO) test -run '^$$' -bench 'IdleConnection' -benchtime 1x -count 3 ./gateway

## fuzz: every fuzz target of every package, found by go test -list (a new
## one is run without a change here), each for FUZZTIME (default 30s); it
## names each target as it starts, and the ones that failed at the end
FUZZTIME ?= 30s
fuzz:
	@list=$$($(GO) test -list '^Fuzz' ./...) || { echo "$$list"; exit 1; }; \
	targets=$$(echo "$$list" | awk '/^Fuzz/ { f[n++] = $$1; next } /^ok/ { for (i = 0; i < n; i++) print $$2 ":" f[i]; n = 0 }'); \
	echo "fuzz: $$(echo "$$targets" | wc -l) targets, $(FUZZTIME) each:"; echo "$$targets" | sed 's/^/  /'; \
	failed=""; for t in $$targets; do pkg=$${t%%:*}; f=$${t##*:}; \
	  echo "== $$pkg $$f ($(FUZZTIME))"; \
	  $(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || failed="$$failed $$pkg.$$f"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

clean:
	rm -rf bin data

## bench-*: the scenarios of BENCHMARKS.md. Each builds chatd and chatbench
## into bin/, lets chatbench start a fresh deployment (chatd dev on a
## redis-server and a clickhouse-server, ports chosen by the kernel; a fresh
## one per step of a sweep), prints a summary and writes bin/bench/NAME.json.
## BENCH_ARGS appends chatbench flags (the last of a flag wins), e.g.
##   make bench-steady BENCH_ARGS='-duration 60s'
BENCH_OUT   ?= bin/bench
BENCH_ARGS  ?=
BENCH_STACK ?= -chatd bin/chatd -redis -clickhouse
BENCH_RATES ?= 25,50,100,200,400,800,1600,3200

# chatbench runs bin/chatbench on a fresh deployment: $(1) names the JSON,
# $(2) is the scenario's flags.
define chatbench
	@mkdir -p $(BENCH_OUT)
	$(GO) build -o bin/ ./cmd/chatd ./cmd/chatbench
	bin/chatbench $(BENCH_STACK) -json $(BENCH_OUT)/$(1).json $(2) $(BENCH_ARGS)
endef

.PHONY: bench-storm bench-steady bench-max bench-pull bench-idle bench-rebuild bench-plot bench-micro bench-e2e

## bench-storm: (a) the receipt storm: 200-member groups, 20% online, read receipts on
bench-storm:
	$(call chatbench,storm,-groups 10 -group-size 200 -online 0.2 -rate 100 -read 0.5 -duration 30s -warmup 5s)

## bench-steady: (b) 5,000 messages/s into 50-member groups, 10 online in each
bench-steady:
	$(call chatbench,steady,-groups 100 -group-size 50 -online 0.2 -rate 5000 -duration 30s -warmup 5s -offline-check 500)

## bench-max: (c) the highest rate whose end-to-end p99 stays within 100 ms (50-member groups, all online)
bench-max:
	$(call chatbench,max,-groups 20 -group-size 50 -find-max -rate 50 -p99-target 100ms -duration 15s -warmup 3s -plot $(BENCH_OUT)/max.png)

## bench-pull: (d) offline pull of 50,000 messages across 50 groups
bench-pull:
	$(call chatbench,pull,-pull 1000 -groups 50 -pull-users 5)

## bench-idle: (e) 10,000 idle connections, chatd's RSS per connection
bench-idle:
	$(call chatbench,idle,-idle 10000)

## bench-rebuild: (f) chatctl rebuild of 1M ack events and chatctl backfill into ClickHouse
bench-rebuild: deps
	$(GO) test -run '^$$' -bench 'RebuildAcks|Backfill' -benchtime 1x -timeout 30m ./cmd/chatctl

## bench-plot: latency percentiles against the send rate, into docs/latency.png
bench-plot:
	$(call chatbench,plot,-groups 20 -group-size 50 -sweep $(BENCH_RATES) -duration 15s -warmup 3s -plot docs/latency.png)

## bench-micro: the hot paths' microbenchmarks: event codec, routing to 500 members, read counts of a page of 50
bench-micro: deps
	$(GO) test -run '^$$' -bench . ./schema ./client
	$(GO) test -run '^$$' -bench 'FanoutRoute500' ./consumers
	$(GO) test -run '^$$' -bench 'ReadCountsPage50' ./store

## bench-e2e: one load run; BENCH_ARGS sets its shape (chatbench -h)
bench-e2e:
	$(call chatbench,e2e,)

## chaos: the fault-injection run of RELIABILITY.md for DURATION (default 2m):
## every process killed and restarted, Redis wiped, ClickHouse stopped 30 s,
## clients killed and cut mid-frame, poison records; then the verdict. The
## JSON result goes to CHAOS_JSON (default chaos-result.json).
DURATION   ?= 2m
CHAOS_JSON ?= chaos-result.json
.PHONY: chaos
chaos: deps
	$(GO) run ./cmd/chatchaos -duration $(DURATION) -json $(CHAOS_JSON)
