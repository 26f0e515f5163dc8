// Command chatd runs the group-chat delivery backend: every role in one
// process on the embedded default (chatd dev), or one role per process on
// external Kafka, Redis and ClickHouse (chatd persister, chatd projector).
//
// Settings come from flags or CHAT_* environment variables; `chatd help`
// lists them.
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
	if err := run(ctx, os.Args[1:], os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "chatd:", err)
		os.Exit(1)
	}
}
