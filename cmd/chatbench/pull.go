package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
)

// pullResult is what the pull mode reports; it is also its -json document.
type pullResult struct {
	Gateways       []string  `json:"gateways"`
	Stack          string    `json:"stack"`
	Prefix         string    `json:"prefix"`
	Groups         int       `json:"groups"`
	GroupSize      int       `json:"group_size"`
	PerGroup       int       `json:"per_group"`
	Messages       int       `json:"messages"`
	BodySize       int       `json:"body_size"`
	PageSize       int       `json:"page_size"`
	PreloadSeconds float64   `json:"preload_seconds"` // produced and persisted
	Quiet          bool      `json:"quiet"`           // the deployment was idle (< 0.1 cores) before the pulls
	Runs           []pullRun `json:"runs"`
	Best           float64   `json:"best_ms"`
	Median         float64   `json:"median_ms"`
	OK             bool      `json:"ok"`
}

// pullRun is one member's login and pull of everything.
type pullRun struct {
	Uid      string             `json:"uid"`
	DialMS   float64            `json:"dial_ms"`  // dial, auth, sync
	TotalMS  float64            `json:"total_ms"` // from the dial to the last message handed over
	Handed   int64              `json:"handed"`
	Pulls    int64              `json:"pulls"` // pull requests
	PerS     float64            `json:"messages_per_s"`
	ServerMS float64            `json:"server_cpu_ms"` // CPU time of the deployment's processes from the dial to the last message
	CPUMS    map[string]float64 `json:"cpu_ms"`        // the same by process
	BenchMS  float64            `json:"bench_cpu_ms"`  // CPU time of chatbench (the SDK client) in the same span
	Complete bool               `json:"complete"`      // every message once, in order, each with its own body
	Problem  string             `json:"problem,omitempty"`
	Faults   []string           `json:"faults,omitempty"` // a few messages handed with another body than their own, one line each
}

// runPull preloads cfg.Pull messages into each of cfg.Groups groups
// straight into chat.messages (the gateway's send path would take minutes
// for the backlog; the read path measured here is the same either way),
// waits until they are persisted, then logs cfg.PullUsers members in, one
// after the other, each opening every group at once, and times each until
// every message was handed to OnMessage.
func runPull(ctx context.Context, cfg *Config, d *deployment, stdout io.Writer) error {
	if d.Kafka == "" {
		return fmt.Errorf("-pull needs the deployment's Kafka broker: pass -kafka host:port or use -chatd")
	}
	pageSize := cfg.PageSize
	if pageSize == 0 {
		pageSize = protocol.MaxLimit
	}
	res := &pullResult{Gateways: d.URLs, Stack: cfg.Launch.String(), Prefix: cfg.Prefix, Groups: cfg.Groups, GroupSize: cfg.GroupSize,
		PerGroup: cfg.Pull, Messages: cfg.Groups * cfg.Pull, BodySize: cfg.BodySize, PageSize: pageSize}
	a := newAPI(d.URLs[0], d.Admin, cfg.Concurrency)
	readers := make([]string, cfg.PullUsers)
	for i := range readers {
		readers[i] = fmt.Sprintf("%s-r%d", cfg.Prefix, i)
	}
	gids := make([]string, cfg.Groups)
	senders := make([]string, cfg.Groups)
	logf("pull: %d groups of %d (%d readers in each), %d messages each...", cfg.Groups, cfg.GroupSize, len(readers), cfg.Pull)
	err := parallel(ctx, cfg.Groups, cfg.Concurrency, func(ctx context.Context, g int) error {
		gids[g] = fmt.Sprintf("%s-g%d", cfg.Prefix, g)
		senders[g] = fmt.Sprintf("%s-s%d", cfg.Prefix, g)
		members := append(slices.Clone(readers), senders[g])
		for j := len(members); j < cfg.GroupSize; j++ {
			members = append(members, fmt.Sprintf("%s-g%d-m%d", cfg.Prefix, g, j))
		}
		return a.createGroup(ctx, gids[g], members)
	})
	if err != nil {
		return err
	}
	toks, err := a.tokens(ctx, readers, cfg.Concurrency)
	if err != nil {
		return err
	}
	if err := waitJoined(ctx, a, toks, gids); err != nil {
		return err
	}

	t0 := time.Now()
	want, err := preload(ctx, cfg, d.Kafka, gids, senders)
	if err != nil {
		return err
	}
	if err := waitPersisted(ctx, a, toks[0], gids, want); err != nil {
		return err
	}
	res.PreloadSeconds = time.Since(t0).Seconds()
	logf("pull: %d messages preloaded and persisted in %.1f s; waiting for the deployment to go quiet...", res.Messages, res.PreloadSeconds)
	if res.Quiet = waitQuiet(ctx, d.Procs, 0.1, time.Minute); !res.Quiet {
		logf("pull: the deployment still used over 0.1 cores a minute later; measuring anyway")
	}

	res.OK = true
	for i, tok := range toks {
		body := func(g, i int) string { return pullBody(cfg.Prefix, g, i, cfg.BodySize) }
		r := pullOnce(ctx, d.URLs[i%len(d.URLs)], tok, pageSize, gids, want, body, d.Procs, time.Minute)
		r.Uid = readers[i]
		res.Runs = append(res.Runs, r)
		res.OK = res.OK && r.Complete
		logf("pull: %s: %d messages in %.1f ms (dial %.1f ms, %d pulls; CPU: deployment %.0f ms, chatbench %.0f ms)%s",
			r.Uid, r.Handed, r.TotalMS, r.DialMS, r.Pulls, r.ServerMS, r.BenchMS, problem(r.Problem))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	totals := make([]float64, len(res.Runs))
	for i, r := range res.Runs {
		totals[i] = r.TotalMS
	}
	slices.Sort(totals)
	res.Best, res.Median = totals[0], totals[len(totals)/2]

	fmt.Fprintf(stdout, "chatbench pull %s: %d messages (%d groups × %d, %d-byte bodies) pulled by %d members in turn, pages of %d; stack: %s\n",
		res.Prefix, res.Messages, res.Groups, res.PerGroup, res.BodySize, len(res.Runs), res.PageSize, res.Stack)
	for _, r := range res.Runs {
		fmt.Fprintf(stdout, "  %s: login to last message %.1f ms (dial+auth+sync %.1f ms), %d handed over, %.0f messages/s, %d pull requests; CPU ms: %s, chatbench %.0f%s\n",
			r.Uid, r.TotalMS, r.DialMS, r.Handed, r.PerS, r.Pulls, formatMS(r.CPUMS), r.BenchMS, problem(r.Problem))
		for _, f := range r.Faults {
			fmt.Fprintf(stdout, "    fault: %s\n", f)
		}
	}
	verdict := "every member got every message once, in order, with its own body"
	if !res.OK {
		verdict = "FAILED: see above"
	}
	fmt.Fprintf(stdout, "pull: best %.1f ms, median %.1f ms for %d messages (goal <= 150 ms); %s\n", res.Best, res.Median, res.Messages, verdict)
	if cfg.JSON != "" {
		if err := writeJSONFile(cfg.JSON, res); err != nil {
			return err
		}
	}
	if !res.OK {
		return fmt.Errorf("pull check failed")
	}
	return nil
}

func problem(p string) string {
	if p == "" {
		return ""
	}
	return "; " + p
}

// waitJoined waits until every reader's sync lists every group.
func waitJoined(ctx context.Context, a *api, toks, gids []string) error {
	deadline := time.Now().Add(time.Minute)
	for _, tok := range toks {
		for {
			have, err := a.syncGids(ctx, tok)
			if err != nil {
				return err
			}
			missing := 0
			for _, g := range gids {
				if !have[g] {
					missing++
				}
			}
			if missing == 0 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pull: %d groups still missing from a reader's sync after a minute; is the member projector running?", missing)
			}
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// pullBody is the body of the i-th preloaded message of group g,
// "<prefix>.p<g>.<i>." padded to size: it names its message, so that a
// pull that hands a msgid with another message's body is caught.
func pullBody(prefix string, g, i, size int) string {
	b := fmt.Sprintf("%s.p%d.%d.", prefix, g, i)
	if len(b) < size {
		b += strings.Repeat("x", size-len(b))
	}
	return b
}

// preload appends cfg.Pull messages to each group through a producer, in
// batches, and returns each group's msgids in order.
func preload(ctx context.Context, cfg *Config, broker string, gids, senders []string) ([][]int64, error) {
	p, err := producers.New(producers.Config{Brokers: []string{broker}})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	want := make([][]int64, len(gids))
	const batch = 1000
	for i := 0; i < cfg.Pull; i += batch {
		n := min(batch, cfg.Pull-i)
		var ms []schema.Message
		for g := range gids {
			for j := 0; j < n; j++ {
				ms = append(ms, schema.Message{Gid: gids[g], Sender: senders[g], Body: []byte(pullBody(cfg.Prefix, g, i+j, cfg.BodySize)),
					ClientMsgID: cfg.Prefix + "-p" + strconv.Itoa(g) + "-" + strconv.Itoa(i+j), SentAt: time.Now().UnixMilli()})
			}
		}
		ids, err := p.SendMessages(ctx, ms)
		if err != nil {
			return nil, fmt.Errorf("pull: preload: %w", err)
		}
		for k, id := range ids {
			g := k / n
			want[g] = append(want[g], id)
		}
	}
	return want, nil
}

// waitPersisted waits until each group's last preloaded message can be
// pulled.
func waitPersisted(ctx context.Context, a *api, tok string, gids []string, want [][]int64) error {
	deadline := time.Now().Add(5 * time.Minute)
	for g, gid := range gids {
		last := want[g][len(want[g])-1]
		for {
			var page protocol.Page
			path := fmt.Sprintf("/v1/groups/%s/messages?after=%d&limit=1", gid, last-1)
			if err := a.call(ctx, http.MethodGet, path, tok, nil, &page); err != nil {
				return fmt.Errorf("pull: waiting for the persister: %w", err)
			}
			if len(page.Msgs) == 1 && page.Msgs[0].MsgID == last {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pull: %s: message %d not pullable after 5 minutes; is the persister running?", gid, last)
			}
			if !sleepCtx(ctx, 200*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	return nil
}

// pullOnce logs a fresh client in, opens every group at once and times
// until every wanted message was handed over (for at most wait after the
// login), then checks each group's messages: all of want, once, in order,
// the i-th of group g with body(g, i). The check comes after the timing:
// building the bodies to compare takes 14 ms of CPU for 50,000 messages
// here, beside a pull of them measured in about 100 ms.
func pullOnce(ctx context.Context, url, tok string, pageSize int, gids []string, want [][]int64, body func(g, i int) string, procs []namedPID, wait time.Duration) pullRun {
	var total int64
	at := make(map[string]map[int64][2]int, len(gids)) // gid -> msgid -> (g, i) of want
	for g, w := range want {
		total += int64(len(w))
		at[gids[g]] = make(map[int64][2]int, len(w))
		for i, id := range w {
			at[gids[g]][id] = [2]int{g, i}
		}
	}
	var mu sync.Mutex
	got := map[string][]protocol.Message{}
	var n atomic.Int64
	done := make(chan struct{})
	mark := startCPU(procs)
	t0 := time.Now()
	c, err := client.Dial(ctx, client.Config{
		URL:      wsURL(url),
		Token:    func(context.Context) (string, error) { return tok, nil },
		PageSize: pageSize,
		OnMessage: func(m protocol.Message) {
			mu.Lock()
			got[m.Gid] = append(got[m.Gid], m)
			mu.Unlock()
			if n.Add(1) == total {
				close(done)
			}
		},
	})
	if err != nil {
		return pullRun{Problem: err.Error()}
	}
	defer c.Close()
	r := pullRun{DialMS: ms(time.Since(t0))}
	// The wait bounds the Opens too: a client whose gateway is gone waits
	// in Open to reconnect.
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	errs := make(chan error, len(gids))
	for _, gid := range gids {
		go func() { errs <- c.Open(wctx, gid) }()
	}
	for range gids {
		if err := <-errs; err != nil && r.Problem == "" {
			r.Problem = err.Error()
		}
	}
	select {
	case <-done:
	case <-wctx.Done():
		if ctx.Err() == nil {
			r.Problem += fmt.Sprintf(" only %d of %d messages handed over within %v", n.Load(), total, wait)
		}
	}
	r.TotalMS = ms(time.Since(t0))
	byProc, bench := mark.spent()
	r.CPUMS, r.BenchMS = map[string]float64{}, ms(bench)
	for name, d := range byProc {
		r.CPUMS[name] = ms(d)
		r.ServerMS += ms(d)
	}
	r.Handed, r.Pulls = n.Load(), c.Stats().Pulls
	r.PerS = float64(r.Handed) / (r.TotalMS / 1000)
	mu.Lock()
	defer mu.Unlock()
	altered := 0
	for gid, ms := range got {
		for _, m := range ms {
			if gi, ok := at[gid][m.MsgID]; ok && m.Body != body(gi[0], gi[1]) {
				if altered++; len(r.Faults) < 5 {
					r.Faults = append(r.Faults, fmt.Sprintf("%s msgid %d handed with another body than the one sent: %.40q", gid, m.MsgID, m.Body))
				}
			}
		}
	}
	r.Complete = r.Problem == "" && altered == 0
	if altered > 0 {
		r.Problem += fmt.Sprintf(" %d messages handed with another body than their own", altered)
	}
	msgids := func(ms []protocol.Message) []int64 {
		out := make([]int64, len(ms))
		for i, m := range ms {
			out[i] = m.MsgID
		}
		return out
	}
	for g, gid := range gids {
		if !slices.Equal(msgids(got[gid]), want[g]) {
			r.Complete = false
			r.Problem += fmt.Sprintf(" %s: %d messages handed over, want %d in msgid order", gid, len(got[gid]), len(want[g]))
			break
		}
	}
	return r
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func formatMS(m map[string]float64) string {
	if len(m) == 0 {
		return "no pid watched"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
