package main

import (
	"context"
	"errors"
	"fmt"
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
	dep     *deployment
	rec     *recorder
	tokens  []string  // by user index; online users only until the offline check
	members []*member // the online users, by member index
	byUser  []*member // user index -> member; nil when offline
	foreign atomic.Int64

	accMu       sync.Mutex
	accepted    [][]sendRef      // group -> its accepted sends
	failedSends []map[int32]bool // group -> the sends made to it that failed on their client: they may have got in
}

// sendRef ties a message to the send that made it: k is the send's number,
// carried in the body, so a message can be recognised under any msgid. gen
// is the member's client generation that was handed it (churn reconnects
// bump it): a client may hand over again what an earlier one was handed
// but did not ack.
type sendRef struct {
	msgid int64
	k     int32 // -1: not a body of this run
	gen   int32
}

// member is one user with a client: what it was handed, and its current
// client (nil while churned away).
type member struct {
	idx  int // member index: the histogram shard
	user int
	n    atomic.Int64 // OnMessage calls, every client of the member

	// cmu guards cur: senders hold it for reading during a Send (TryRLock:
	// a member being churned is skipped, not waited for), churn for
	// writing, so no send is cut by a churn disconnect.
	cmu     sync.RWMutex
	cur     *client.Client
	closing *atomic.Bool // set when cur is taken to be closed: its OnError reports are its own closing
	gen     int32        // bumped by every new client; guarded by cmu

	mu  sync.Mutex
	got map[string][]sendRef // gid -> messages in the order OnMessage saw them
}

// client returns the member's current client, or nil.
func (m *member) client() *client.Client {
	m.cmu.RLock()
	defer m.cmu.RUnlock()
	return m.cur
}

// take makes m clientless and returns the client it had, marked closing,
// or nil. It waits for the sends in flight on it.
func (m *member) take() *client.Client {
	m.cmu.Lock()
	defer m.cmu.Unlock()
	c := m.cur
	if c != nil {
		m.closing.Store(true)
	}
	m.cur = nil
	return c
}

// runLoad runs the load against d and returns what it measured.
func runLoad(ctx context.Context, cfg *Config, d *deployment) (*result, error) {
	p := newPlan(cfg)
	if len(p.senders) == 0 {
		return nil, fmt.Errorf("no user is online with -online %g of %d users: nobody would send", cfg.Online, cfg.Users)
	}
	b := newBench(cfg, p, d)
	if perConn := cfg.Rate / float64(len(p.online)); perConn > 40 {
		fmt.Fprintf(os.Stderr, "warning: %.0f sends/s per connection; the gateway's default limit is 50/s (burst 100): expect rate_limited\n", perConn)
	}
	a := newAPI(d.URLs[0], d.Admin, cfg.Concurrency)
	logf("prefix %s: %d users (%d online), %d groups of %d; tokens...", cfg.Prefix, len(p.uids), len(p.online), len(p.gids), cfg.GroupSize)
	if err := b.fetchTokens(ctx, a, p.online); err != nil {
		return nil, err
	}
	logf("creating %d groups and waiting for the memberships...", len(p.gids))
	if err := setupGroups(ctx, cfg, a, p, b.tokens); err != nil {
		return nil, err
	}
	logf("connecting %d clients to %d gateway(s)...", len(p.online), len(d.URLs))
	connecting := time.Now()
	if err := b.connect(ctx); err != nil {
		b.close()
		return nil, err
	}
	logf("connected in %.2f s (dial, auth and sync each)", time.Since(connecting).Seconds())
	// The fan-out caches presence for 2 s: let it see every connection.
	if !sleepCtx(ctx, 3*time.Second) {
		b.close()
		return nil, ctx.Err()
	}
	before := recordCounts(ctx, d.Kafka)
	res := b.load(ctx)
	b.close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.Records = recordsPerMessage(before, recordCounts(ctx, d.Kafka))
	res.Records.perDelivery(b.rec.delivered.Load())
	if n := b.offlineCount(); n > 0 {
		logf("offline check: %d offline members log in and pull...", n)
		res.Offline = b.offlineCheck(ctx, a, n)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	res.fill(cfg, p, b)
	return res, nil
}

// newBench is a run of plan p against d, nothing sent yet.
func newBench(cfg *Config, p *plan, d *deployment) *bench {
	b := &bench{cfg: cfg, plan: p, dep: d, rec: newRecorder(), byUser: make([]*member, len(p.uids)),
		tokens: make([]string, len(p.uids)), accepted: make([][]sendRef, len(p.gids)), failedSends: make([]map[int32]bool, len(p.gids))}
	for g := range b.failedSends {
		b.failedSends[g] = map[int32]bool{}
	}
	return b
}

// fetchTokens gets dev tokens for the given users into b.tokens.
func (b *bench) fetchTokens(ctx context.Context, a *api, users []int) error {
	uids := make([]string, len(users))
	for i, u := range users {
		uids[i] = b.plan.uids[u]
	}
	toks, err := a.tokens(ctx, uids, b.cfg.Concurrency)
	if err != nil {
		return err
	}
	for i, u := range users {
		b.tokens[u] = toks[i]
	}
	return nil
}

// connect dials a client for every online user, spread over the gateways.
func (b *bench) connect(ctx context.Context) error {
	b.members = make([]*member, len(b.plan.online))
	for i, u := range b.plan.online {
		b.members[i] = &member{idx: i, user: u, got: map[string][]sendRef{}}
		b.byUser[u] = b.members[i]
	}
	return parallel(ctx, len(b.members), b.cfg.Concurrency, func(ctx context.Context, i int) error {
		return b.dial(ctx, b.members[i])
	})
}

// dial connects a new client for m and makes it m's current one.
func (b *bench) dial(ctx context.Context, m *member) error {
	m.cmu.Lock()
	gen := m.gen + 1
	m.cmu.Unlock()
	since := time.Now()
	closing := new(atomic.Bool)
	var cp atomic.Pointer[client.Client] // for OnMessage, which may run before Dial returns
	c, err := client.Dial(ctx, client.Config{
		URL:         wsURL(b.dep.URLs[m.idx%len(b.dep.URLs)]),
		Token:       func(context.Context) (string, error) { return b.tokens[m.user], nil },
		AckEvery:    b.cfg.AckEvery,
		AckInterval: b.cfg.AckInterval,
		PageSize:    b.cfg.PageSize,
		OnMessage:   func(msg protocol.Message) { b.onMessage(m, gen, since, cp.Load(), msg) },
		OnError: func(err error) {
			if !closing.Load() {
				b.rec.onError(err)
			}
		},
		OnReceipts: b.rec.onReceipts,
	})
	if err != nil {
		return fmt.Errorf("%w %s: %w", errDial, b.plan.uids[m.user], err)
	}
	cp.Store(c)
	m.cmu.Lock()
	m.cur, m.closing, m.gen = c, closing, gen
	m.cmu.Unlock()
	return nil
}

// onMessage runs on the delivery goroutine of m's client c (generation
// gen, connected at since; nil until Dial returned). Messages sent before
// since are the catch-up of a member back from churn: counted, not
// measured.
func (b *bench) onMessage(m *member, gen int32, since time.Time, c *client.Client, msg protocol.Message) {
	now := time.Now()
	sent, k, ok := b.parseBody(msg.Body)
	m.mu.Lock()
	m.got[msg.Gid] = append(m.got[msg.Gid], sendRef{msg.MsgID, k, gen})
	m.mu.Unlock()
	m.n.Add(1)
	if !ok {
		b.foreign.Add(1)
		return
	}
	b.rec.delivery(m.idx, int(k), sent, now, !sent.Before(since))
	if c != nil && b.cfg.Read > 0 && msg.Sender != b.plan.uids[m.user] && sample(msg.MsgID, m.idx, b.cfg.Read) {
		switch err := c.MarkRead(context.Background(), msg.Gid, msg.MsgID); {
		case errors.Is(err, client.ErrClosed):
			// Churn or the run's end is closing c while it hands msg over.
		case err != nil:
			b.rec.error(err)
		default:
			b.rec.readMarks.Add(1)
		}
	}
}

// sample decides, the same way every run, whether member marks msgid read:
// true for a fraction f of the (msgid, member) pairs.
func sample(msgid int64, member int, f float64) bool {
	h := uint64(msgid)*0x9E3779B97F4A7C15 ^ uint64(member+1)*0xBF58476D1CE4E5B9
	h ^= h >> 31
	h *= 0x94D049BB133111EB
	h ^= h >> 29
	return float64(h>>11)/(1<<53) < f
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
// and ok false for a body chatbench did not write in this run, or not
// whole.
func (b *bench) parseBody(body string) (sent time.Time, k int32, ok bool) {
	rest, ok := strings.CutPrefix(body, b.cfg.Prefix+".")
	if !ok {
		return time.Time{}, -1, false
	}
	ns, rest, ok1 := strings.Cut(rest, ".")
	ks, pad, ok2 := strings.Cut(rest, ".")
	v, err1 := strconv.ParseInt(ns, 10, 64)
	kv, err2 := strconv.ParseInt(ks, 10, 32)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return time.Time{}, -1, false
	}
	// The rest is the padding up to the body size: a body cut or garbled
	// on the way is not the send's.
	if len(body) != max(b.cfg.BodySize, len(body)-len(pad)) || strings.Trim(pad, "x") != "" {
		return time.Time{}, -1, false
	}
	return time.Unix(0, v), int32(kv), true
}

// sendLoop issues the scheduled sends from start until end, by the clock:
// send k is due at start + k/rate whatever became of the earlier ones.
// atEnd runs when the last send is issued; sendLoop then waits for the
// answers.
func (b *bench) sendLoop(ctx context.Context, end time.Time, atEnd func()) {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for k := 0; ; {
		now := time.Now()
		for {
			due := b.rec.due(k)
			if !due.Before(end) {
				atEnd()
				return
			}
			if due.After(now) {
				break
			}
			b.rec.lag.record(k, now.Sub(due))
			wg.Add(1)
			go func(k int) { defer wg.Done(); b.send(ctx, k) }(k)
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

// send makes send k: from the k-th (member, group) pair of the plan, or
// the next one whose member is connected (churn). A send with no connected
// sender is scheduled and failed.
func (b *bench) send(ctx context.Context, k int) {
	b.rec.scheduled.Add(1)
	if b.rec.measuredSend(k) {
		b.rec.mScheduled.Add(1)
	}
	n := len(b.plan.senders)
	for i := 0; i < n; i++ {
		pr := b.plan.senders[(k+i)%n]
		m := b.byUser[pr.user]
		if !m.cmu.TryRLock() {
			continue // being churned away
		}
		if c := m.cur; c != nil {
			b.sendOn(ctx, m, c, pr.group, k)
			m.cmu.RUnlock()
			return
		}
		m.cmu.RUnlock()
	}
	b.rec.failed.Add(1)
	b.rec.error(errNoSender)
}

var errNoSender = fmt.Errorf("no connected sender")

// errDial marks a client that could not connect and log in.
var errDial = errors.New("dial")

// sendOn sends send k from m. Its latencies count from when it was due,
// not from when this goroutine got to run: a generator that fell behind
// (GC, the server holding the cores) must not hide its lateness from the
// percentiles.
func (b *bench) sendOn(ctx context.Context, m *member, c *client.Client, group, k int) {
	sent := b.rec.due(k)
	sctx, cancel := context.WithTimeout(ctx, b.cfg.SendTimeout)
	msgid, err := c.Send(sctx, b.plan.gids[group], b.body(sent, k))
	cancel()
	b.rec.sendDone(m.idx, k, sent, err)
	b.accMu.Lock()
	if err == nil {
		b.accepted[group] = append(b.accepted[group], sendRef{msgid, int32(k), 0})
	} else {
		b.failedSends[group][int32(k)] = true
	}
	b.accMu.Unlock()
}

// close closes every client, flushing their acks.
func (b *bench) close() {
	b.rec.closing.Store(true)
	var wg sync.WaitGroup
	for _, m := range b.members {
		if m == nil {
			continue
		}
		c := m.take()
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
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
