package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/protocol"
)

// bench is one load run: the plan, the connected members and what they saw.
type bench struct {
	cfg     *Config
	plan    *plan
	rec     *recorder
	members []*member // the online users, by member index
	byUser  []*member // user index -> member; nil when offline
	foreign atomic.Int64

	accMu    sync.Mutex
	accepted [][]sendRef // group -> its accepted sends
}

// sendRef ties a message to the send that made it: k is the send's number,
// carried in the body, so a message can be recognised under any msgid.
type sendRef struct {
	msgid int64
	k     int32 // -1: not a body of this run
}

// member is one online user: a client and every message it was handed.
type member struct {
	idx  int // member index: the histogram shard
	user int
	c    *client.Client
	n    atomic.Int64 // OnMessage calls

	mu  sync.Mutex
	got map[string][]sendRef // gid -> messages in the order OnMessage saw them
}

func runLoad(ctx context.Context, cfg *Config, stdout io.Writer) error {
	p := newPlan(cfg)
	if len(p.senders) == 0 {
		return fmt.Errorf("no user is online with -online %g of %d users: nobody would send", cfg.Online, cfg.Users)
	}
	b := &bench{cfg: cfg, plan: p, rec: newRecorder(), byUser: make([]*member, len(p.uids)), accepted: make([][]sendRef, len(p.gids))}
	if perConn := cfg.Rate / float64(len(p.online)); perConn > 40 {
		fmt.Fprintf(os.Stderr, "warning: %.0f sends/s per connection; the gateway's default limit is 50/s (burst 100): expect rate_limited\n", perConn)
	}
	a := newAPI(cfg.URLs[0], cfg.AdminToken, cfg.Concurrency)
	logf("prefix %s: %d users (%d online), %d groups of %d; tokens...", cfg.Prefix, len(p.uids), len(p.online), len(p.gids), cfg.GroupSize)
	onlineUids := make([]string, len(p.online))
	for i, u := range p.online {
		onlineUids[i] = p.uids[u]
	}
	toks, err := a.tokens(ctx, onlineUids, cfg.Concurrency)
	if err != nil {
		return err
	}
	tokens := make([]string, len(p.uids))
	for i, u := range p.online {
		tokens[u] = toks[i]
	}
	logf("creating %d groups and waiting for the memberships...", len(p.gids))
	if err := setupGroups(ctx, cfg, a, p, tokens); err != nil {
		return err
	}
	logf("connecting %d clients to %d gateway(s)...", len(p.online), len(cfg.URLs))
	if err := b.connect(ctx, tokens); err != nil {
		b.close()
		return err
	}
	// The fan-out caches presence for 2 s: let it see every connection.
	if !sleepCtx(ctx, 3*time.Second) {
		b.close()
		return ctx.Err()
	}
	res := b.load(ctx)
	b.close()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	res.fill(cfg, p, b)
	res.print(stdout)
	if cfg.JSON != "" {
		if err := res.writeJSON(cfg.JSON); err != nil {
			return err
		}
	}
	if !res.Loss.OK {
		return fmt.Errorf("loss check failed: %d missing, %d duplicates, %d out of order", res.Loss.Missing, res.Loss.Duplicates, res.Loss.OutOfOrder)
	}
	return nil
}

// connect dials a client for every online user, spread over the gateways.
func (b *bench) connect(ctx context.Context, tokens []string) error {
	b.members = make([]*member, len(b.plan.online))
	for i, u := range b.plan.online {
		b.members[i] = &member{idx: i, user: u, got: map[string][]sendRef{}}
		b.byUser[u] = b.members[i]
	}
	return parallel(ctx, len(b.members), b.cfg.Concurrency, func(ctx context.Context, i int) error {
		m := b.members[i]
		tok := tokens[m.user]
		c, err := client.Dial(ctx, client.Config{
			URL:         wsURL(b.cfg.URLs[i%len(b.cfg.URLs)]),
			Token:       func(context.Context) (string, error) { return tok, nil },
			AckEvery:    b.cfg.AckEvery,
			AckInterval: b.cfg.AckInterval,
			OnMessage:   func(msg protocol.Message) { b.onMessage(m, msg) },
			OnError:     b.rec.onError,
		})
		if err != nil {
			return fmt.Errorf("dial %s: %w", b.plan.uids[m.user], err)
		}
		m.c = c
		return nil
	})
}

// onMessage runs on m's delivery goroutine.
func (b *bench) onMessage(m *member, msg protocol.Message) {
	now := time.Now()
	sent, k, ok := b.parseBody(msg.Body)
	m.mu.Lock()
	m.got[msg.Gid] = append(m.got[msg.Gid], sendRef{msg.MsgID, k})
	m.mu.Unlock()
	m.n.Add(1)
	if !ok {
		b.foreign.Add(1)
		return
	}
	b.rec.delivery(m.idx, sent, now)
}

// body is a message body carrying its send time: "<prefix>.<unix ns>.<k>." and padding.
func (b *bench) body(sent time.Time, k int) string {
	var sb strings.Builder
	sb.Grow(b.cfg.BodySize)
	sb.WriteString(b.cfg.Prefix)
	sb.WriteByte('.')
	sb.WriteString(strconv.FormatInt(sent.UnixNano(), 10))
	sb.WriteByte('.')
	sb.WriteString(strconv.Itoa(k))
	sb.WriteByte('.')
	for sb.Len() < b.cfg.BodySize {
		sb.WriteByte('x')
	}
	return sb.String()
}

// parseBody returns the send time and send number a body carries; k is -1
// and ok false for a body chatbench did not write in this run.
func (b *bench) parseBody(body string) (sent time.Time, k int32, ok bool) {
	rest, ok := strings.CutPrefix(body, b.cfg.Prefix+".")
	if !ok {
		return time.Time{}, -1, false
	}
	ns, rest, ok1 := strings.Cut(rest, ".")
	ks, _, ok2 := strings.Cut(rest, ".")
	v, err1 := strconv.ParseInt(ns, 10, 64)
	kv, err2 := strconv.ParseInt(ks, 10, 32)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return time.Time{}, -1, false
	}
	return time.Unix(0, v), int32(kv), true
}

// load sends for warm-up plus duration, drains, pulls every group once
// more and checks for loss.
func (b *bench) load(ctx context.Context) *result {
	cfg := b.cfg
	start := time.Now()
	b.rec.from = start.Add(cfg.Warmup)
	b.rec.to = b.rec.from.Add(cfg.Duration)
	res := &result{}

	pctx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); b.progress(pctx, start, res) }()

	// CPU use over the measured span only: from the end of the warm-up to
	// the last send.
	cpuFrom := make(chan cpuMark, 1)
	go func() {
		if sleepCtx(ctx, cfg.Warmup) {
			cpuFrom <- startCPU(cfg.PID)
		}
	}()
	b.sendLoop(ctx, start, b.rec.to, func() {
		select {
		case m := <-cpuFrom:
			res.CPU = m.stop()
		default:
		}
	})
	if ctx.Err() != nil {
		stopProgress()
		<-progressDone
		return res
	}
	logf("sends done; waiting for the pushes (up to %v)...", cfg.Drain)
	deadline := time.Now().Add(cfg.Drain)
	b.waitDelivered(ctx, deadline, 3*time.Second)
	l := b.check()
	missingAfterDrain := l.Missing

	// Then Open every group that still misses messages, as a user would,
	// until none does or the drain time is over. An overloaded server may
	// not have stored every message yet: what is still missing at the end
	// was not delivered within -drain, which is not proof of a loss.
	b.rec.finalPull.Store(true)
	rounds := 0
	for first := true; first || l.Missing > 0 && time.Now().Before(deadline) && ctx.Err() == nil; first = false {
		rounds++
		todo := l.incomplete
		if first {
			todo = b.allPairs()
		}
		if !first && !sleepCtx(ctx, time.Second) {
			break
		}
		logf("final pull, round %d: %d (member, group) pairs, %d messages missing...", rounds, len(todo), l.Missing)
		b.open(ctx, todo)
		b.waitDelivered(ctx, deadline, 2*time.Second)
		l = b.check()
	}
	stopProgress()
	<-progressDone
	res.Loss = l
	res.Loss.MissingAfterDrain = missingAfterDrain
	res.Loss.PullRounds = rounds
	for _, m := range b.members {
		res.SDK.add(m.c.Stats())
	}
	return res
}

// sendLoop issues the scheduled sends from start until end, by the clock:
// send k is due at start + k/rate whatever became of the earlier ones.
// atEnd runs when the last send is issued; sendLoop then waits for the
// answers.
func (b *bench) sendLoop(ctx context.Context, start, end time.Time, atEnd func()) {
	interval := float64(time.Second) / b.cfg.Rate
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for k := 0; ; {
		now := time.Now()
		for {
			due := start.Add(time.Duration(float64(k) * interval))
			if !due.Before(end) {
				atEnd()
				return
			}
			if due.After(now) {
				break
			}
			b.rec.lag.record(k, now.Sub(due))
			pr := b.plan.senders[k%len(b.plan.senders)]
			wg.Add(1)
			go func(k int) { defer wg.Done(); b.send(ctx, pr, k) }(k)
			k++
		}
		select {
		case <-ctx.Done():
			atEnd()
			return
		case <-t.C:
		}
	}
}

func (b *bench) send(ctx context.Context, pr pair, k int) {
	m := b.byUser[pr.user]
	sent := time.Now()
	b.rec.scheduled.Add(1)
	if b.rec.measured(sent) {
		b.rec.mScheduled.Add(1)
	}
	sctx, cancel := context.WithTimeout(ctx, b.cfg.SendTimeout)
	msgid, err := m.c.Send(sctx, b.plan.gids[pr.group], b.body(sent, k))
	cancel()
	b.rec.sendDone(m.idx, sent, err)
	if err == nil {
		b.accMu.Lock()
		b.accepted[pr.group] = append(b.accepted[pr.group], sendRef{msgid, int32(k)})
		b.accMu.Unlock()
	}
}

// waitDelivered waits until every member was handed as many messages as
// its groups had accepted sends, or until nothing arrived for quiet, or
// until deadline.
func (b *bench) waitDelivered(ctx context.Context, deadline time.Time, quiet time.Duration) {
	want := make([]int64, len(b.members))
	b.accMu.Lock()
	for i, m := range b.members {
		for _, g := range b.plan.groupsOf[m.user] {
			want[i] += int64(len(b.accepted[g]))
		}
	}
	b.accMu.Unlock()
	last, lastChange := int64(-1), time.Now()
	for time.Now().Before(deadline) && time.Since(lastChange) < quiet {
		done, total := true, int64(0)
		for i, m := range b.members {
			n := m.n.Load()
			total += n
			done = done && n >= want[i]
		}
		if done {
			return
		}
		if total != last {
			last, lastChange = total, time.Now()
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
}

// allPairs lists every (member, group of the member).
func (b *bench) allPairs() []slot {
	var out []slot
	for i, m := range b.members {
		for _, g := range b.plan.groupsOf[m.user] {
			out = append(out, slot{i, g})
		}
	}
	return out
}

// open calls Open for each (member, group), in parallel.
func (b *bench) open(ctx context.Context, todo []slot) {
	_ = parallel(ctx, len(todo), b.cfg.Concurrency, func(ctx context.Context, i int) error {
		m := b.members[todo[i].member]
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := m.c.Open(octx, b.plan.gids[todo[i].group]); err != nil {
			b.rec.error(err)
		}
		return nil
	})
}

// close closes every client, flushing their acks.
func (b *bench) close() {
	b.rec.closing.Store(true)
	var wg sync.WaitGroup
	for _, m := range b.members {
		if m == nil || m.c == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); m.c.Close() }()
	}
	wg.Wait()
}

// wsURL turns a gateway base URL into its WebSocket endpoint.
func wsURL(base string) string {
	if rest, ok := strings.CutPrefix(base, "https://"); ok {
		return "wss://" + rest + "/v1/ws"
	}
	return "ws://" + strings.TrimPrefix(base, "http://") + "/v1/ws"
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "chatbench: "+format+"\n", args...)
}
