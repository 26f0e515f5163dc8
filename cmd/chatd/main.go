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

	"github.com/redis/go-redis/v9"
)

func main() {
	redis.SetLogger(redisLog{})
	if len(os.Args) > 1 && roles[os.Args[1]] != nil {
		// Not for chatd help, where the variables are looked up.
		warnings, err := checkVarNames(os.Environ())
		if err != nil {
			fmt.Fprintln(os.Stderr, "chatd:", err)
			os.Exit(1)
		}
		for _, w := range warnings {
			fmt.Fprintln(os.Stderr, "chatd: warning:", w)
		}
	}
	if err := run(stopOnSignal(), os.Args[1:], os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "chatd:", err)
		os.Exit(1)
	}
}

// stopOnSignal returns a context that ends at the first SIGINT or SIGTERM,
// which starts a graceful shutdown (within CHAT_SHUTDOWN_TIMEOUT). A
// second one stops the process at once, for an operator who will not wait.
// The second is handled here rather than left to the signal's default
// action: a process started with SIGINT ignored (a shell's background job)
// would go back to ignoring it.
func stopOnSignal() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "chatd: %v: stopping gracefully (up to CHAT_SHUTDOWN_TIMEOUT); send it again to stop at once\n", s)
		cancel()
		s = <-sigs
		fmt.Fprintf(os.Stderr, "chatd: %v again: stopping at once\n", s)
		os.Exit(128 + int(s.(syscall.Signal)))
	}()
	return ctx
}
