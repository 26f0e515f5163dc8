// Command chatbench drives a running chatd over WebSocket through the Go
// client SDK and measures it: accepted sends per second, end-to-end latency
// from a send's due time to OnMessage on every online member (HDR histogram),
// pushes per second, ack and receipt records per message, errors by code,
// and a loss check (every member got every accepted message of its groups
// exactly once, in msgid order across its clients, under the msgid its
// sender was told and with its body, and nothing else of them but sends
// that failed on their client yet got in: the online ones by push, the
// offline ones by pull after the run). Other modes sweep the rate (and plot latency against it), search
// the highest rate within a p99 target, time an offline member's pull of a
// large backlog, and measure chatd's RSS per idle connection.
//
// Sends are scheduled by the clock (open loop): a slow server does not slow
// the offered load, so the latency it reports is not flattered by
// coordinated omission.
//
// Usage:
//
//	chatbench -chatd /tmp/chatd -redis -clickhouse -groups 20 -group-size 50 -rate 1000
//	chatbench -url http://127.0.0.1:8080 -admin-token T -pid $(pidof chatd) -rate 500
//	chatbench -chatd /tmp/chatd -sweep 100,200,400,800 -plot docs/latency.png
//
// `chatbench -h` lists every flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "chatbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string) (err error) {
	cfg, err := parseConfig(args, getenv, os.Stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	stopProfiles, err := startProfiles(cfg.CPUProfile, cfg.MemProfile)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopProfiles()) }()

	if len(cfg.Sweep) > 0 || cfg.FindMax {
		return runSweep(ctx, cfg, os.Stdout)
	}
	return withDeployment(ctx, cfg, func(d *deployment) error {
		switch {
		case cfg.Idle > 0:
			return runIdle(ctx, cfg, d, os.Stdout)
		case cfg.Pull > 0:
			return runPull(ctx, cfg, d, os.Stdout)
		}
		res, err := runLoad(ctx, cfg, d)
		if err != nil {
			return err
		}
		res.print(os.Stdout)
		if cfg.JSON != "" {
			if err := res.writeJSON(cfg.JSON); err != nil {
				return err
			}
		}
		if !res.ok() {
			return errors.New("loss check failed (see the loss check lines above)")
		}
		return nil
	})
}

// withDeployment starts a fresh deployment (-chatd) or takes the given one,
// waits until every gateway is healthy, runs fn and stops what it started.
func withDeployment(ctx context.Context, cfg *Config, fn func(*deployment) error) (err error) {
	d := given(cfg)
	if cfg.Launch.Chatd != "" {
		logf("starting %s...", cfg.Launch)
		if d, err = launch(ctx, cfg.Launch); err != nil {
			return &launchError{err}
		}
		logf("started: gateways %v, Kafka %s; logs in %s", d.URLs, d.Kafka, d.Dir)
		defer func() {
			if serr := d.stop(); serr != nil {
				err = errors.Join(err, fmt.Errorf("stopping what chatbench started: %w", serr))
			}
			if cfg.Launch.Keep {
				logf("kept %s", d.Dir)
			}
		}()
	}
	for _, u := range d.URLs {
		if err := newAPI(u, "", 1).waitHealthy(ctx, 2*time.Minute); err != nil {
			return &launchError{err}
		}
	}
	return fn(d)
}

// launchError is a deployment that could not be started or did not become
// healthy: a sweep stops there rather than count it as a failed step.
type launchError struct{ err error }

func (e *launchError) Error() string { return e.err.Error() }
func (e *launchError) Unwrap() error { return e.err }
