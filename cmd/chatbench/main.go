// Command chatbench drives a running chatd over WebSocket through the Go
// client SDK and measures it: accepted sends per second, end-to-end latency
// from just before Send to OnMessage on every online member (HDR histogram),
// pushes per second, errors by code, and a loss check (every online member
// got every accepted message of its groups exactly once). With -idle N it
// instead opens N idle connections and reports the chatd process's RSS per
// connection.
//
// Sends are scheduled by the clock (open loop): a slow server does not slow
// the offered load, so the latency it reports is not flattered by
// coordinated omission.
//
// Usage:
//
//	chatd dev &                       # logs its admin token
//	chatbench -admin-token T -groups 20 -group-size 50 -rate 1000 -duration 30s
//	chatbench -admin-token T -idle 10000 -pid $(pidof chatd)
//
// `chatbench -h` lists every flag.
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
		fmt.Fprintln(os.Stderr, "chatbench:", err)
		os.Exit(1)
	}
}
