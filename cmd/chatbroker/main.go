// Command chatbroker runs the embedded Kafka broker (kfake, package broker)
// as a process of its own, with its log on disk and every produced batch
// synced before it is acknowledged, so the rest of the system can be run
// as separate processes against it and the broker can be killed and
// restarted like a real one: on the same address, with the same data.
//
// Usage:
//
//	chatbroker -listen 127.0.0.1:9092 -data-dir ./data/kafka -partitions 16
//
// Settings are flags or CHAT_* variables (chatbroker -h lists them). With
// -partitions it creates the chat.* topics when missing (topics.Ensure),
// chat.messages with -message-retention (a week; -1h keeps everything,
// which roles without ClickHouse need); chatd does the same at its start.
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
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "chatbroker:", err)
		os.Exit(1)
	}
}
