package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/protocol"
)

// offlineResult is the check of the members who were offline during the
// run: each logs in afterwards, opens its groups and must be handed every
// accepted message of them exactly once, by pull.
type offlineResult struct {
	Offline    int              `json:"offline"` // offline members in some group
	Checked    int              `json:"checked"` // of them, logged in and checked
	Loss       lossCheck        `json:"loss"`
	CatchUp    quantiles        `json:"catch_up"` // per member: dial until every message of its groups was handed over
	Seconds    float64          `json:"seconds"`
	PulledPerS float64          `json:"pulled_per_s"` // messages handed over per second, all members together
	Errors     map[string]int64 `json:"errors"`
}

// offlineChunk is how many offline members are logged in at a time.
const offlineChunk = 256

// offlineUsers lists the users in some group who were not online.
func (b *bench) offlineUsers() []int {
	var out []int
	for u, gs := range b.plan.groupsOf {
		if len(gs) > 0 && b.byUser[u] == nil {
			out = append(out, u)
		}
	}
	return out
}

// offlineCount is how many offline members the check logs in.
func (b *bench) offlineCount() int {
	n := len(b.offlineUsers())
	if b.cfg.OfflineCheck >= 0 {
		n = min(n, b.cfg.OfflineCheck)
	}
	return n
}

// offlineCheck logs n offline members in (spread evenly over them), a
// chunk at a time, and checks what their pulls hand over.
func (b *bench) offlineCheck(ctx context.Context, a *api, n int) *offlineResult {
	all := b.offlineUsers()
	users := make([]int, n)
	for i := range users {
		users[i] = all[i*len(all)/n]
	}
	res := &offlineResult{Offline: len(all)}
	rec := newRecorder()
	var loggedIn atomic.Int64
	// The online members' clients are closed: what they were handed is
	// final, the failed sends that got in included.
	logs := b.groupLogs(b.members)
	var checked []failedHanded
	var handed int64
	start := time.Now()
	for from := 0; from < len(users) && ctx.Err() == nil; from += offlineChunk {
		part := users[from:min(from+offlineChunk, len(users))]
		// A member who could not log in, or whom an interrupt left
		// unchecked, got nothing: the check counts their messages missing
		// rather than passing without them.
		ms := make([]*member, len(part))
		for j := range ms {
			ms[j] = &member{idx: from + j, user: part[j], got: map[string][]sendRef{}}
		}
		if err := b.fetchTokens(ctx, a, part); err != nil {
			rec.error(err)
		} else {
			_ = parallel(ctx, len(part), b.cfg.Concurrency, func(ctx context.Context, j int) error {
				if b.catchUp(ctx, ms[j], logs, rec) {
					loggedIn.Add(1)
				}
				return nil
			})
		}
		for _, m := range ms {
			res.Loss.Members++
			for _, g := range b.plan.groupsOf[m.user] {
				got := m.got[b.plan.gids[g]]
				res.Loss.Expected += int64(len(logs[g].accepted))
				res.Loss.Delivered += int64(len(got))
				res.Loss.checkOne(b.plan.gids[g], b.plan.uids[m.user], logs[g], got)
			}
			res.Loss.notMember(b.plan, m)
			handed += m.n.Load()
			checked = append(checked, b.failedHandedTo(m, logs))
		}
	}
	b.checkFailedPulledOnly(&res.Loss, logs, checked)
	res.Checked = int(loggedIn.Load())
	res.Loss.verdict()
	if res.Loss.Members < n {
		res.Loss.OK = false // interrupted: members left unchecked
	}
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.PulledPerS = float64(handed) / res.Seconds
	}
	res.CatchUp = quantilesOf(rec.accept.merged())
	res.Errors = rec.errors()
	return res
}

// catchUp dials a client for m, opens its groups and waits until it was
// handed every message of their logs (opening again what is still
// missing, once a second), or -drain ends; then closes the client. The
// time from the dial to the last message goes into rec.accept. It reports
// whether m logged in.
func (b *bench) catchUp(ctx context.Context, m *member, logs []groupLog, rec *recorder) bool {
	// What is still to come: the accepted sends of m's groups, and the
	// failed ones the online members were handed, by body. Counting
	// messages instead would stop early under overload, when sends that
	// timed out on their client yet got in come too.
	pending := map[int32]bool{}
	for _, g := range b.plan.groupsOf[m.user] {
		for _, ref := range logs[g].accepted {
			pending[ref.k] = true
		}
		for _, k := range logs[g].unconfirmed {
			pending[k] = true
		}
	}
	var left atomic.Int64
	left.Store(int64(len(pending)))
	t0 := time.Now()
	var closing atomic.Bool
	c, err := client.Dial(ctx, client.Config{
		URL:         wsURL(b.dep.URLs[m.idx%len(b.dep.URLs)]),
		Token:       func(context.Context) (string, error) { return b.tokens[m.user], nil },
		AckEvery:    b.cfg.AckEvery,
		AckInterval: b.cfg.AckInterval,
		PageSize:    b.cfg.PageSize,
		OnMessage: func(msg protocol.Message) {
			_, k, _ := b.parseBody(msg.Body)
			m.mu.Lock()
			m.got[msg.Gid] = append(m.got[msg.Gid], sendRef{msg.MsgID, k, 1})
			if pending[k] {
				delete(pending, k)
				left.Add(-1)
			}
			m.mu.Unlock()
			m.n.Add(1)
		},
		OnError: func(err error) {
			if !closing.Load() {
				rec.error(err)
			}
		},
	})
	if err != nil {
		rec.error(fmt.Errorf("%w %s: %w", errDial, b.plan.uids[m.user], err))
		return false
	}
	defer func() {
		closing.Store(true) // its own closing is no error
		_ = c.Close()
	}()
	deadline := time.Now().Add(b.cfg.Drain)
	for round := 0; left.Load() > 0 && time.Now().Before(deadline) && ctx.Err() == nil; round++ {
		if round > 0 && !sleepCtx(ctx, time.Second) {
			return true
		}
		for _, g := range b.plan.groupsOf[m.user] {
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := c.Open(octx, b.plan.gids[g]); err != nil {
				rec.error(err)
			}
			cancel()
		}
		for wait := time.Now().Add(time.Second); left.Load() > 0 && time.Now().Before(wait); {
			if !sleepCtx(ctx, 5*time.Millisecond) {
				return true
			}
		}
	}
	if left.Load() == 0 {
		rec.accept.record(m.idx, time.Since(t0))
	}
	return true
}

// failedHanded is what one offline member was handed of the sends that
// failed on their client: per group, msgid -> send, under msgids no
// accepted send returned.
type failedHanded struct {
	user int
	sent map[int]map[int64]int32
}

// failedHandedTo returns what m was handed of the failed sends of its
// groups (m's client is closed).
func (b *bench) failedHandedTo(m *member, logs []groupLog) failedHanded {
	f := failedHanded{user: m.user, sent: map[int]map[int64]int32{}}
	for _, g := range b.plan.groupsOf[m.user] {
		for _, r := range m.got[b.plan.gids[g]] {
			if !logs[g].failed[r.k] || slices.ContainsFunc(logs[g].accepted, func(a sendRef) bool { return a.msgid == r.msgid }) {
				continue
			}
			if f.sent[g] == nil {
				f.sent[g] = map[int64]int32{}
			}
			if _, seen := f.sent[g][r.msgid]; !seen {
				f.sent[g][r.msgid] = r.k
			}
		}
	}
	return f
}

// checkFailedPulledOnly holds the sends that failed on their client yet
// got in, and that only offline members were handed (checkOne judged those
// an online member was handed), to the rule of checkOne: every member of
// the group, online or offline, must be handed each under its msgid, with
// the same body. l is the offline check's; checked, its members.
func (b *bench) checkFailedPulledOnly(l *lossCheck, logs []groupLog, checked []failedHanded) {
	only := make([]map[int64]int32, len(logs)) // per group, msgid -> the send first handed under it
	for _, f := range checked {
		for _, g := range slices.Sorted(maps.Keys(f.sent)) {
			for _, id := range slices.Sorted(maps.Keys(f.sent[g])) {
				k := f.sent[g][id]
				if _, online := logs[g].unconfirmed[id]; online {
					continue
				}
				if only[g] == nil {
					only[g] = map[int64]int32{}
				}
				if first, ok := only[g][id]; !ok {
					only[g][id] = k
				} else if first != k {
					l.Mismatched++
					l.fault("%s to %s: msgid %d came with send %d's body, another offline member got send %d's under it", b.plan.gids[g], b.plan.uids[f.user], id, k, first)
				}
			}
		}
	}
	for g, ids := range only {
		gid := b.plan.gids[g]
		for _, id := range slices.Sorted(maps.Keys(ids)) {
			for _, u := range b.plan.members[g] {
				m := b.byUser[u]
				if m == nil {
					continue
				}
				m.mu.Lock()
				got := slices.ContainsFunc(m.got[gid], func(r sendRef) bool { return r.msgid == id })
				m.mu.Unlock()
				if !got {
					l.MissingUnconfirmed++
					l.fault("%s to %s (online): msgid %d (send %d, failed on its client yet got in) never came; offline members pulled it", gid, b.plan.uids[u], id, ids[id])
				}
			}
			for _, f := range checked {
				if !slices.Contains(b.plan.groupsOf[f.user], g) {
					continue
				}
				if _, ok := f.sent[g][id]; !ok {
					l.MissingUnconfirmed++
					l.fault("%s to %s: msgid %d (send %d, failed on its client yet got in) never came; other offline members pulled it", gid, b.plan.uids[f.user], id, ids[id])
				}
			}
		}
	}
}

func (o *offlineResult) print(w io.Writer) {
	fmt.Fprintf(w, "offline:      %d of %d offline members logged in after the run and pulled: %.0f messages/s over %.1f s; per member, login to all handed over: %s; errors: %s\n",
		o.Checked, o.Offline, o.PulledPerS, o.Seconds, o.CatchUp, formatErrors(o.Errors))
	o.Loss.print(w, "offline, by pull")
}
