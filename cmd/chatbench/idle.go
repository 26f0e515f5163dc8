package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupchat/chatd/client"
)

// idleResult is what the idle mode reports; it is also its -json document.
type idleResult struct {
	Gateways     []string         `json:"gateways"`
	Stack        string           `json:"stack"`
	Prefix       string           `json:"prefix"`
	PID          int              `json:"pid"`
	Wanted       int              `json:"wanted"`
	Connected    int              `json:"connected"`
	Errors       map[string]int64 `json:"errors"`
	DialLatency  quantiles        `json:"dial_latency"` // dial + auth + sync
	DialSeconds  float64          `json:"dial_seconds"`
	RSSBeforeKiB int64            `json:"rss_before_kib"`
	RSSAfterKiB  int64            `json:"rss_after_kib"`  // after settling, all connected
	RSSPeakKiB   int64            `json:"rss_peak_kib"`   // highest sample while connected
	RSSClosedKiB int64            `json:"rss_closed_kib"` // 3 s after every client closed
	PerConnKiB   float64          `json:"per_conn_kib"`   // (after - before) / connected
	MarginalKiB  float64          `json:"marginal_kib"`   // RSS slope from the first step to the last
	Steps        []idleStep       `json:"steps"`
	BenchRSSKiB  int64            `json:"bench_rss_kib"` // chatbench's own, connected
}

// idleStep is the chatd RSS read after a step of dials.
type idleStep struct {
	Connected int   `json:"connected"`
	RSSKiB    int64 `json:"rss_kib"`
}

// idleSteps is how many steps the idle connections are opened in.
const idleSteps = 5

// runIdle opens cfg.Idle idle connections (each a client that logged in and
// synced, in no group) and reports the growth of the chatd process's RSS.
func runIdle(ctx context.Context, cfg *Config, d *deployment, stdout io.Writer) error {
	if len(d.Procs) == 0 || d.Procs[0].Name != "chatd" {
		return errors.New("-idle needs -pid of the chatd process, whose RSS it reads (or -chatd)")
	}
	pid := d.Procs[0].PID
	res := &idleResult{Gateways: d.URLs, Prefix: cfg.Prefix, PID: pid, Wanted: cfg.Idle, Stack: cfg.Launch.String()}
	a := newAPI(d.URLs[0], "", cfg.Concurrency)
	uids := make([]string, cfg.Idle)
	for i := range uids {
		uids[i] = fmt.Sprintf("%s-idle%d", cfg.Prefix, i)
	}
	logf("idle: %d dev tokens...", cfg.Idle)
	toks, err := a.tokens(ctx, uids, cfg.Concurrency)
	if err != nil {
		return err
	}
	a.hc.CloseIdleConnections()
	if !sleepCtx(ctx, 2*time.Second) {
		return ctx.Err()
	}
	if res.RSSBeforeKiB, err = rssKiB(pid); err != nil {
		return err
	}

	// Dial in steps, reading the RSS after each: the slope between the
	// first step and the last is the marginal cost of a connection, free
	// of the fixed costs the first connections bring (buffers, pools).
	logf("idle: dialing %d connections in %d steps, %d at a time...", cfg.Idle, idleSteps, cfg.Concurrency)
	rec := newRecorder()
	clients := make([]*client.Client, cfg.Idle)
	defer func() { closeAll(clients) }()
	dialStart := time.Now()
	for step := 1; step <= idleSteps; step++ {
		from, to := cfg.Idle*(step-1)/idleSteps, cfg.Idle*step/idleSteps
		n := dialIdle(ctx, cfg, d.URLs, toks, clients, from, to, rec)
		res.Connected += n
		if ctx.Err() != nil {
			return ctx.Err()
		}
		settle := 3 * time.Second
		if step == idleSteps {
			settle = cfg.IdleSettle
		}
		if !sleepCtx(ctx, settle) {
			return ctx.Err()
		}
		v, err := rssKiB(pid)
		if err != nil {
			return err
		}
		res.Steps = append(res.Steps, idleStep{Connected: res.Connected, RSSKiB: v})
		res.RSSPeakKiB = max(res.RSSPeakKiB, v)
		logf("idle: %d connected, chatd RSS %d KiB", res.Connected, v)
	}
	res.DialSeconds = time.Since(dialStart).Seconds()
	res.RSSAfterKiB = res.Steps[len(res.Steps)-1].RSSKiB
	res.BenchRSSKiB, _ = rssKiB(os.Getpid())
	if res.Connected > 0 {
		res.PerConnKiB = float64(res.RSSAfterKiB-res.RSSBeforeKiB) / float64(res.Connected)
	}
	if first, last := res.Steps[0], res.Steps[len(res.Steps)-1]; last.Connected > first.Connected {
		res.MarginalKiB = float64(last.RSSKiB-first.RSSKiB) / float64(last.Connected-first.Connected)
	}
	res.Errors = rec.errors()
	res.DialLatency = quantilesOf(rec.accept.merged())

	rec.closing.Store(true)
	closeAll(clients)
	clients = nil
	if sleepCtx(ctx, 3*time.Second) {
		res.RSSClosedKiB, _ = rssKiB(pid)
	}

	fmt.Fprintf(stdout, "chatbench idle %s: %d of %d connections open (dial+auth+sync %s; %.1fs for all)\n",
		res.Prefix, res.Connected, res.Wanted, res.DialLatency, res.DialSeconds)
	fmt.Fprintf(stdout, "chatd pid %d RSS: %d KiB before, %d KiB with all open after %v (peak %d), %d KiB 3 s after closing them all\n",
		res.PID, res.RSSBeforeKiB, res.RSSAfterKiB, cfg.IdleSettle, res.RSSPeakKiB, res.RSSClosedKiB)
	var steps []string
	for _, st := range res.Steps {
		steps = append(steps, fmt.Sprintf("%d: %d KiB", st.Connected, st.RSSKiB))
	}
	fmt.Fprintf(stdout, "RSS by connections open: %s\n", strings.Join(steps, ", "))
	fmt.Fprintf(stdout, "per idle connection: %.1f KiB on average, %.1f KiB marginal (slope from the first step to the last); goal <= 12 KiB\n",
		res.PerConnKiB, res.MarginalKiB)
	fmt.Fprintf(stdout, "errors: %s; chatbench's own RSS %d KiB\n", formatErrors(res.Errors), res.BenchRSSKiB)
	if cfg.JSON != "" {
		return writeJSONFile(cfg.JSON, res)
	}
	return nil
}

// dialIdle dials clients[from:to], cfg.Concurrency at a time, and returns
// how many connected; failures are counted in rec.
func dialIdle(ctx context.Context, cfg *Config, urls []string, toks []string, clients []*client.Client, from, to int, rec *recorder) int {
	var n atomic.Int64
	_ = parallel(ctx, to-from, cfg.Concurrency, func(ctx context.Context, j int) error {
		i := from + j
		tok := toks[i]
		t0 := time.Now()
		c, err := client.Dial(ctx, client.Config{
			URL:     wsURL(urls[i%len(urls)]),
			Token:   func(context.Context) (string, error) { return tok, nil },
			OnError: rec.onError,
		})
		if err != nil {
			rec.error(fmt.Errorf("%w: %w", errDial, err))
			return nil // count it, keep dialing the others
		}
		rec.accept.record(i, time.Since(t0))
		clients[i] = c
		n.Add(1)
		return nil
	})
	return int(n.Load())
}

func closeAll(clients []*client.Client) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	for _, c := range clients {
		if c == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() { defer wg.Done(); c.Close(); <-sem }()
	}
	wg.Wait()
}
