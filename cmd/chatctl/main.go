// Command chatctl operates a chatd deployment: it creates and verifies the
// topics, administers groups through chat.members events, lists and resets
// consumer groups, rebuilds the Redis projections from the topics, backfills
// ClickHouse from them, and tails a topic as JSON lines.
//
// Settings come from flags or the same CHAT_* variables chatd reads;
// `chatctl help` lists the commands and every setting.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

func main() {
	// go-redis logs each failed dial of its pool to stderr ("redis:
	// 2024/05/01 12:00:00 pool.go:770: redis: connection pool: failed to
	// dial after 5 attempts"), lines above chatctl's own error, which
	// says the same with what to check.
	redis.SetLogger(quietRedis{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chatctl:", withDialHint(err))
		os.Exit(1)
	}
}

// withDialHint adds what to check to an error of a server that could not
// be reached, unless it says so already.
func withDialHint(err error) error {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return err
	}
	if strings.Contains(err.Error(), "is the broker up") {
		// Without CHAT_KAFKA_BROKERS exported, chatctl asks 127.0.0.1:9092:
		// the question alone did not say where the address came from.
		return fmt.Errorf("%w (CHAT_KAFKA_BROKERS or -kafka-brokers says where the brokers are; 127.0.0.1:9092 unless set)", err)
	}
	return fmt.Errorf("%w; is the server at %v up, and is it the one meant? (CHAT_KAFKA_BROKERS, CHAT_REDIS_ADDRS and CHAT_CLICKHOUSE_ADDRS, or their flags, say where each is)", err, op.Addr)
}

// quietRedis drops go-redis's own log lines: every Redis failure chatctl
// meets comes back to it as an error, which it reports.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}
