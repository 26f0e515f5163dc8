package consumers

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// The fan-out's recipients: who they are (membership) and where they are
// online (presence).
//
// Membership: since the chat.* topics are co-partitioned, the groups of
// partition p of chat.messages have their member records in partition p of
// chat.members, a compacted topic, that is a table. A follower reads that
// partition from its start with a plain reader (no group: every fan-out
// instance that handles p reads all of it), folds it with
// store.Membership.Apply (the fold the member projector runs in Redis) and
// follows new records until its assignment ends.
//
// Presence: store.OnlineNodes, cached for PresenceTTL across partitions,
// evicted early by the announcements of users who came online.

// memberSyncTimeout bounds the wait of one Handle for its follower; past it
// Handle fails and the runner retries, the follower reading on meanwhile.
const memberSyncTimeout = 10 * time.Second

// memberTable is the membership of the groups of one partition.
type memberTable struct {
	mu      sync.RWMutex
	groups  map[string]map[string]store.Membership // gid -> uid -> membership
	next    int64                                  // offset after the last record applied
	changed chan struct{}                          // closed and replaced when next moves
	records int64                                  // records applied
	bad     int64                                  // records that did not decode or lay misfiled, skipped

	joinsMu  sync.Mutex // guards joins and tracking; taken under mu
	tracking bool       // joins are noted: a Handle has synced with the table
	joins    []joinAt   // joins applied since the last takeJoins
}

// joinAt is a join the table applied.
type joinAt struct {
	gid, uid string
	pos      int64
	// late is set once the join is found late (lateJoins): it waits for
	// the member projection, whatever the fan-out forgets meanwhile.
	late  bool
	since time.Time // when it was found late; it waits maxJoinWait at most
}

// maxJoinWait is how long a late join waits for the member projection to
// hold it before its joiner is told to sync anyway.
const maxJoinWait = time.Minute

// maxTrackedJoins bounds the joins noted between two batches of messages;
// past it the rest go unnoted (their joiners are not told to sync).
const maxTrackedJoins = 100_000

// restoreJoins puts back joins taken whose batch failed, to be taken
// again with its retry.
func (t *memberTable) restoreJoins(joins []joinAt) {
	if len(joins) == 0 {
		return
	}
	t.joinsMu.Lock()
	defer t.joinsMu.Unlock()
	t.joins = append(joins, t.joins...)
	if len(t.joins) > maxTrackedJoins {
		t.joins = t.joins[:maxTrackedJoins]
	}
}

// takeJoins returns the joins applied since the last call and notes the
// next ones; t.mu must be held (for reading), so that no join is applied
// between the call and the snapshots taken under the same hold.
func (t *memberTable) takeJoins() []joinAt {
	t.joinsMu.Lock()
	defer t.joinsMu.Unlock()
	j := t.joins
	t.joins, t.tracking = nil, true
	return j
}

func newMemberTable() *memberTable {
	return &memberTable{groups: map[string]map[string]store.Membership{}, changed: make(chan struct{})}
}

// apply folds one record of chat.members, of partitions partitions. A
// record that does not decode (a tombstone among them: chatd writes
// none), or is misfiled (Misfiled), is skipped, as the member projector's
// runner skips it to the dead-letter topic: the fan-out pushes to whom
// the gateways let read.
func (t *memberTable) apply(m kafka.Message, partitions int, log *slog.Logger) {
	ev, err := schema.DecodeMember(m.Value)
	if err == nil {
		err = Misfiled(&ev, m.Key, m.Partition, partitions)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil:
		t.bad++
		log.Warn("member record skipped (the member projector dead-letters it)", "offset", m.Offset, "err", err)
	case ev.Op == schema.OpLeaving:
		// A leave is being written at a position at least ev.Pos
		// (producers.Remove): the member sees nothing past ev.Pos from
		// here, and the leave, once read, leaves that as it is (a leave
		// while left changes nothing).
		// A member not known is one whose join compaction took.
		g := t.groups[ev.Gid]
		if m := g[ev.Uid]; ev.HasJoined && (m.State == store.MemberNone || m.State == store.MemberJoined && ev.Joined == m.JoinedAt) {
			if g == nil {
				g = map[string]store.Membership{}
				t.groups[ev.Gid] = g
			}
			g[ev.Uid] = store.Membership{State: store.MemberLeft, JoinedAt: ev.Joined, LeftAt: max(ev.Pos, ev.Joined)}
		}
		t.records++
	default:
		g := t.groups[ev.Gid]
		if g == nil {
			g = map[string]store.Membership{}
			t.groups[ev.Gid] = g
		}
		g[ev.Uid] = g[ev.Uid].Apply(ev)
		t.records++
		if ev.Op == schema.OpJoin {
			t.joinsMu.Lock()
			if t.tracking && len(t.joins) < maxTrackedJoins {
				t.joins = append(t.joins, joinAt{gid: ev.Gid, uid: ev.Uid, pos: ev.Pos})
			}
			t.joinsMu.Unlock()
		}
	}
	t.next = m.Offset + 1
	close(t.changed)
	t.changed = make(chan struct{})
}

// waitFor waits until every record before offset end has been applied.
func (t *memberTable) waitFor(ctx context.Context, end int64) error {
	for {
		t.mu.RLock()
		next, changed := t.next, t.changed
		t.mu.RUnlock()
		if next >= end {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("applied up to offset %d of %d: %w", next, end, ctx.Err())
		}
	}
}

// memberOf is one membership in a snapshot of a group.
type memberOf struct {
	uid string
	m   store.Membership
}

// snapshot returns the memberships of gid; t.mu must be held.
func (t *memberTable) snapshot(gid string) []memberOf {
	g := t.groups[gid]
	out := make([]memberOf, 0, len(g))
	for uid, m := range g {
		out = append(out, memberOf{uid, m})
	}
	return out
}

// follow reads partition part of chat.members from its start into t until
// ctx ends.
func (f *Fanout) follow(ctx context.Context, part int, t *memberTable) {
	log := f.log.With("topic", topics.Members, "partition", part)
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:         f.brokers,
		Dialer:          f.security.Dialer(),
		Topic:           topics.Members,
		Partition:       part,
		StartOffset:     kafka.FirstOffset,
		MinBytes:        1,
		MaxBytes:        16 << 20,
		MaxWait:         250 * time.Millisecond,
		ReadLagInterval: -1,
		ErrorLogger:     kafka.LoggerFunc(func(f string, a ...any) { log.Debug(fmt.Sprintf(f, a...)) }),
	})
	defer reader.Close()
	partitions := f.partitions() // read by the runner before the batch that started this
	for attempt := 0; ; {
		m, err := reader.FetchMessage(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn("reading members failed; retrying", "err", err)
			if !sleep(ctx, min(100*time.Millisecond<<min(attempt, 6), 5*time.Second)) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
		if f.beforeApply != nil {
			f.beforeApply(m)
		}
		t.apply(m, partitions, log)
	}
}

// syncMembers waits until the follower of p has applied every record that
// chat.members partition p held when the call began, so that a membership
// change made before a message was sent is known when it is pushed.
func (f *Fanout) syncMembers(ctx context.Context, p *fanPartition) error {
	ctx, cancel := context.WithTimeout(ctx, memberSyncTimeout)
	defer cancel()
	resp, err := f.kafka.ListOffsets(ctx, &kafka.ListOffsetsRequest{
		Topics: map[string][]kafka.OffsetRequest{topics.Members: {kafka.LastOffsetOf(p.id)}},
	})
	if err != nil {
		return fmt.Errorf("consumers: fan-out: end of %s/%d: %w", topics.Members, p.id, err)
	}
	end := int64(-1)
	for _, po := range resp.Topics[topics.Members] {
		if po.Partition == p.id {
			if po.Error != nil {
				return fmt.Errorf("consumers: fan-out: end of %s/%d: %w", topics.Members, p.id, po.Error)
			}
			end = po.LastOffset
		}
	}
	if end < 0 {
		return fmt.Errorf("consumers: fan-out: end of %s/%d: partition missing from the answer", topics.Members, p.id)
	}
	if err := p.members.waitFor(ctx, end); err != nil {
		return fmt.Errorf("consumers: fan-out: membership of partition %d: %w", p.id, err)
	}
	return nil
}

// presenceCache remembers where users are online (nowhere, too) for the
// PresenceTTL, all partitions together. Announcements of users who came
// online (store.SubscribePresence) evict them at once; a lookup that an
// eviction overtook is not cached. The subscription runs with the ctx of
// the Handle that started it; once that ends (a rebalance), the next Handle
// subscribes again and the cache starts empty.
type presenceCache struct {
	ttl time.Duration // <0: no cache, no subscription

	subMu sync.Mutex      // serialises subscribing
	live  context.Context // the subscription's; nil or done: none

	mu        sync.Mutex
	entries   map[string]presenceEntry
	seq       uint64 // evictions so far
	cleared   uint64 // seq of the last full clear
	lastSweep time.Time

	lookups, hits atomic.Int64
}

type presenceEntry struct {
	nodes   []string
	expires time.Time
	evicted uint64 // not 0: a tombstone of the eviction with this seq
}

// subscribe makes sure announcements are being followed.
func (c *presenceCache) subscribe(ctx context.Context, r *store.Redis, log *slog.Logger) error {
	if c.ttl < 0 {
		return nil
	}
	c.subMu.Lock()
	defer c.subMu.Unlock()
	if c.live != nil && c.live.Err() == nil {
		return nil
	}
	live, cancel := context.WithCancel(ctx)
	ann, err := r.SubscribePresence(live)
	if err != nil {
		cancel()
		return err
	}
	c.live = live
	c.clear()
	go func() {
		defer cancel()
		for uid := range ann {
			if uid == "" {
				log.Info("presence subscription re-established after a break; presence cache dropped")
				c.clear()
			} else {
				c.evict(uid)
			}
		}
		c.clear() // nothing evicts it now: start empty with the next subscription
	}()
	return nil
}

func (c *presenceCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.cleared = c.seq
	c.entries = map[string]presenceEntry{}
}

func (c *presenceCache) evict(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.entries[uid] = presenceEntry{evicted: c.seq, expires: time.Now().Add(c.ttl)}
}

// lookup returns the nodes of every user online, from the cache or, for
// the rest, one store.OnlineNodes.
func (c *presenceCache) lookup(ctx context.Context, r *store.Redis, uids []string) (map[string][]string, error) {
	nodes := map[string][]string{} // of those online: of a group of 10,000, often a few
	var miss []string
	now := time.Now()
	c.mu.Lock()
	start := c.seq
	for _, uid := range uids {
		if e, ok := c.entries[uid]; ok && e.evicted == 0 && now.Before(e.expires) {
			if len(e.nodes) > 0 {
				nodes[uid] = e.nodes
			}
			continue
		}
		miss = append(miss, uid)
	}
	c.mu.Unlock()
	c.hits.Add(int64(len(uids) - len(miss)))
	if len(miss) == 0 {
		return nodes, nil
	}
	c.lookups.Add(int64(len(miss)))
	// Trusted for ttl from before the lookup: a user who came online just
	// after it was read is pushed to at most ttl after they registered, as
	// the gateways count on (the check of a first sync waits that long).
	asked := time.Now()
	got, err := r.OnlineNodes(ctx, miss)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now = time.Now()
	for _, uid := range miss {
		ns := got[uid]
		if len(ns) > 0 {
			nodes[uid] = ns
		}
		if c.ttl < 0 || c.entries == nil || c.cleared > start {
			continue
		}
		if e, ok := c.entries[uid]; ok && e.evicted > start {
			continue // came online while we looked
		}
		c.entries[uid] = presenceEntry{nodes: ns, expires: asked.Add(c.ttl)}
	}
	if now.Sub(c.lastSweep) > 10*c.ttl {
		for uid, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, uid)
			}
		}
		c.lastSweep = now
	}
	return nodes, nil
}
