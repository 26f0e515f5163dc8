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
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chatctl:", err)
		os.Exit(1)
	}
}
