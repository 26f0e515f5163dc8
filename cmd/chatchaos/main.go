// Command chatchaos runs the fault-injection harness (package chaos) for as
// long as asked: the whole system as separate processes, load from SDK
// clients, kill -9 of every process, broker and Redis restarts, a
// ClickHouse outage, clients killed between pull and ack, connections cut
// mid-frame, poison records; then the verdict on the invariants. It prints
// a report and RELIABILITY.md's table row, writes the result as JSON, and
// exits 1 when an invariant was broken.
//
// Usage (from the repository; it builds chatd and chatbroker):
//
//	chatchaos -duration 15m -json chaos.json
//	make chaos DURATION=15m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/groupchat/chatd/chaos"
	"github.com/groupchat/chatd/internal/flags"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chatchaos:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (bool, error) {
	var cfg chaos.Config
	var jsonPath string
	var keep bool
	fs := flag.NewFlagSet("chatchaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Minute, "how long the load with faults runs (at least 1m)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the world and the fault schedule; 0: from the clock")
	fs.StringVar(&cfg.Dir, "dir", "", "where the servers keep data and logs; default a new temporary directory")
	fs.StringVar(&jsonPath, "json", "", "write the result (timeline included) as JSON to this file")
	fs.BoolVar(&keep, "keep", false, "keep the data directory after a passing run (a failing run always keeps it)")
	fs.IntVar(&cfg.Users, "users", 0, "users (default 12)")
	fs.IntVar(&cfg.Groups, "groups", 0, "groups (default 6)")
	fs.IntVar(&cfg.GroupSize, "group-size", 0, "members per group (default 5)")
	fs.DurationVar(&cfg.SendEvery, "send-every", 0, "mean pause between one online device's sends (default 1s)")
	fs.DurationVar(&cfg.ClickHouseOutage, "clickhouse-outage", 0, "how long ClickHouse is stopped each time (default 30s)")
	// flags.Parse explains a bad value in words, not under the whole list
	// of flags as "parse error"; -h, which ended as an error ("flag: help
	// requested", exit status 2), prints the flags and is no failure.
	if err := flags.Parse(fs, args); errors.Is(err, flag.ErrHelp) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("unexpected argument %q; chatchaos takes flags only", fs.Arg(0))
	}
	cfg.Out = stdout
	res, err := chaos.Run(ctx, cfg)
	if err != nil {
		return false, err
	}
	res.Report(stdout)
	if jsonPath != "" {
		if err := res.WriteJSON(jsonPath); err != nil {
			return false, err
		}
	}
	if res.OK && !keep {
		os.RemoveAll(res.Dir)
	}
	return res.OK, nil
}
