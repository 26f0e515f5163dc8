# The two commands that matter: `make run` and `make test`.
GO       ?= go
GOFLAGS  ?=
# Debian packages the tests need, as binary:package.
TEST_DEPS = redis-server:redis-server clickhouse-server:clickhouse-server kcat:kcat

.PHONY: run test deps vet build bench fuzz clean

## run: the whole system in one process on the embedded default (Kafka, Redis
## embedded; data in ./data; HTTP on 127.0.0.1:8080, Kafka on 127.0.0.1:9092)
run:
	$(GO) run ./cmd/chatd dev

## test: everything that gates a change; installs the servers the tests start
test: deps vet
	$(GO) test $(GOFLAGS) -count=1 -timeout 30m ./...

## deps: install redis-server, clickhouse-server and kcat from Debian's packages when missing
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

## fuzz: each decoder fuzzed for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	for f in FuzzDecodeMessage FuzzDecodeAck FuzzDecodeReceipt FuzzDecodeMember FuzzRoundTripMessage; do \
	  $(GO) test ./schema -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; done

clean:
	rm -rf bin data
