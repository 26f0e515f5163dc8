package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// DefaultPresenceTTL is how long the fan-out trusts a cached presence
// lookup by default: a user who came online, if the fan-out missed the
// announcement, is pushed to at most this long after.
const DefaultPresenceTTL = 2 * time.Second

// GroupFanout is the fan-out's consumer group.
const GroupFanout = "chat.fanout"

// maxPushPayload is the encoded size past which the pushes for one node are
// split over several batches, to stay far below Redis's limit on a
// subscriber's output buffer (32 MiB by default), which cuts the subscriber.
const maxPushPayload = 1 << 20

// Fanout pushes chat.messages to the members who are online: for each
// batch of a partition it finds each message's recipients in its in-memory
// membership (fanout_members.go), their gateway nodes in Redis presence
// (cached), renders each message once as protocol.Message JSON and
// publishes one store.PushBatch per node (store.PublishPushesAll).
//
// Pushes are an optimisation: a push lost (a node down, a Redis restart, a
// crash before the commit) never loses a message, since the client notices
// the gap by prev, or syncs, and pulls. So the fan-out keeps no state in a
// store: its position is its group's committed offsets, a new group starts
// at the end of chat.messages, and messages older than MaxPushAge are not
// pushed (after a long stop it skims its backlog instead of replaying it).
//
// # State and its lifetime
//
// Per partition it holds the membership table and its follower, the last
// msgid seen of each group (prev; of the most recently active groups, see
// prevTable) and the recent sends (duplicates). They
// live as long as the partition's assignment: Handle's ctx, which the
// Runner cancels when the partition is revoked or the runner stops. A new
// assignment starts afresh: the follower reads chat.members again, and
// duplicates of sends before it are not recognised (clients also drop
// duplicates by (sender, cmid)). Keeping the state across rebalances would
// save the re-read, but a partition handled meanwhile by another instance
// would leave prev wrong, and a wrong prev (unlike an unknown one) hides a
// gap from the client.
//
// # Prev
//
// A message's prev is the msgid of the last message of its group that the
// fan-out saw before it, pushed or not (too old), duplicates left out. For
// the first message of a group in an assignment it is the persister's
// (store.PersistedPrevs) when the persister has stored every record before
// it, or every record before the assignment's first: the fan-out has read
// every record since and none of the group's, so the persister's window
// has the group's last message. Otherwise it is unknown, and clients pull
// to be sure. Without the persister's, every restart or rebalance would
// make every online member of every active group pull once, and every new
// group's first message would make its online members pull.
//
// Handle returns an error (the runner retries the batch) only when Redis
// fails (presence or publishing) or the membership cannot be brought up to
// date; the batch's state changes are kept only once it is published.
type Fanout struct {
	Redis       *store.Redis  // required: presence and the push route
	MaxPushAge  time.Duration // messages older than this (by sent_at) are not pushed; default 30s
	PresenceTTL time.Duration // how long a cached presence lookup is trusted; default DefaultPresenceTTL, <0 no cache
	Logger      *slog.Logger  // default: the Base's, else slog.Default()
	PrevGroups  int           // groups whose last msgid a partition keeps at least (twice at most); default DefaultPrevGroups

	mu         sync.Mutex
	brokers    []string
	security   topics.Security
	kafka      *kafka.Client // let go by Stop (closeKafka)
	partitions func() int    // the topics' partition count, once the runner has read it
	closeKafka func()
	log        *slog.Logger
	dedupWin   int64 // ms
	parts      map[int]*fanPartition

	presence presenceCache
	stats    fanoutCounters

	// beforeApply runs in a follower before it applies a record. Tests use
	// it to hold the membership back.
	beforeApply func(kafka.Message)
}

var (
	_ Handler[schema.Message] = (*Fanout)(nil)
	_ Stopper                 = (*Fanout)(nil)
)

// Stop implements Stopper: it closes the fan-out's connections to Kafka, so
// that their pool does not outlive the runner and keep dialing the brokers.
func (f *Fanout) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closeKafka != nil {
		f.closeKafka()
	}
}

// FanoutStats counts what a Fanout did since it started.
type FanoutStats struct {
	Messages    int64 // records handled
	Pushes      int64 // (message, online recipient) pairs published
	Batches     int64 // push batches published
	Unheard     int64 // batches published to a node with no subscriber
	Duplicates  int64 // duplicate sends, not pushed
	Stale       int64 // messages older than MaxPushAge, not pushed
	LateJoins   int64 // joiners told to sync: a message past their join was handled before it
	Lookups     int64 // presence lookups in Redis (cache misses)
	CacheHits   int64 // presence lookups answered by the cache
	MemberRecs  int64 // chat.members records applied (every assignment reads its partition again)
	BadMembers  int64 // chat.members records that did not decode or lay misfiled
	Assignments int64 // partitions taken on (each starts its state afresh)
}

type fanoutCounters struct {
	messages, pushes, batches, unheard, dups, stale, assignments, lateJoins atomic.Int64
}

// Runner returns the fan-out's runner on chat.messages. Call it once per
// Fanout.
func (f *Fanout) Runner(b Base) (*Runner[schema.Message], error) {
	if f.Redis == nil {
		return nil, errors.New("consumers: the fan-out needs Redis")
	}
	if f.MaxPushAge < 0 {
		return nil, fmt.Errorf("consumers: fan-out MaxPushAge %v is negative", f.MaxPushAge)
	}
	if f.MaxPushAge == 0 {
		f.MaxPushAge = 30 * time.Second
	}
	if f.PresenceTTL == 0 {
		f.PresenceTTL = DefaultPresenceTTL
	}
	if f.PrevGroups < 0 {
		return nil, fmt.Errorf("consumers: fan-out PrevGroups %d is negative", f.PrevGroups)
	}
	if f.Logger == nil {
		f.Logger = b.Logger
	}
	if f.Logger == nil {
		f.Logger = slog.Default()
	}
	cfg := runnerConfig(b, GroupFanout, topics.Messages, schema.DecodeMessage, Handler[schema.Message](f), nil)
	cfg.StartAtEnd = true
	r, err := NewRunner(cfg)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// chat.members has chat.messages' partition count (co-partitioned),
	// which the runner reads before it hands over any batch: the member
	// followers, started by the batches, check records against it.
	f.partitions = func() int { return r.partitions }
	f.brokers, f.security = b.Brokers, b.Security
	f.kafka, f.closeKafka = topics.NewClient(b.Brokers, b.Security, memberSyncTimeout)
	f.log = f.Logger.With("consumer", GroupFanout)
	f.dedupWin = f.Redis.DedupWindow().Milliseconds()
	f.parts = map[int]*fanPartition{}
	f.presence.ttl = f.PresenceTTL
	return r, nil
}

// Stats returns the counters.
func (f *Fanout) Stats() FanoutStats {
	s := FanoutStats{
		Messages: f.stats.messages.Load(), Pushes: f.stats.pushes.Load(), Batches: f.stats.batches.Load(),
		Unheard: f.stats.unheard.Load(), Duplicates: f.stats.dups.Load(), Stale: f.stats.stale.Load(), LateJoins: f.stats.lateJoins.Load(),
		Assignments: f.stats.assignments.Load(),
		Lookups:     f.presence.lookups.Load(), CacheHits: f.presence.hits.Load(),
	}
	f.mu.Lock()
	parts := make([]*fanPartition, 0, len(f.parts))
	for _, p := range f.parts {
		parts = append(parts, p)
	}
	f.mu.Unlock()
	for _, p := range parts {
		p.members.mu.RLock()
		s.MemberRecs += p.members.records
		s.BadMembers += p.members.bad
		p.members.mu.RUnlock()
	}
	return s
}

// fanPartition is the fan-out's state of one assigned partition. Only the
// partition's Handle uses it, except members, which its follower writes.
type fanPartition struct {
	id      int
	done    <-chan struct{} // the assignment's ctx.Done()
	members *memberTable
	prev    *prevTable // groups' last msgids seen, pushed or not
	claims  claimSet
	// handling is held by Handle and by tellJoins: one at a time uses
	// the state below.
	handling sync.Mutex
	// staleLast holds, until the fan-out catches up with the log, the
	// groups whose last message was too old to push (gid -> msgid).
	staleLast map[string]int64
}

// partition returns the state of part for the assignment ctx belongs to,
// starting it (and its follower) on the first call of an assignment.
func (f *Fanout) partition(ctx context.Context, part int) *fanPartition {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.parts[part]; p != nil && p.done == ctx.Done() {
		return p
	}
	p := &fanPartition{id: part, done: ctx.Done(), members: newMemberTable(), prev: newPrevTable(f.PrevGroups), staleLast: map[string]int64{}}
	f.parts[part] = p
	f.stats.assignments.Add(1)
	go f.follow(ctx, part, p.members)
	go f.tellJoinsBetweenBatches(ctx, p)
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		if f.parts[part] == p {
			delete(f.parts, part)
		}
		f.mu.Unlock()
		f.tellStaleOnLeave(p)
	})
	return p
}

// outgoing is one message to push.
type outgoing struct {
	msgid int64
	json  []byte
	group []memberOf // the group's memberships, shared by its messages in the batch
}

// Handle implements Handler. ctx must be the partition's assignment (as the
// Runner passes it): the partition's state lives as long as ctx.
func (f *Fanout) Handle(ctx context.Context, part int, recs []Record[schema.Message]) error {
	if f.parts == nil {
		return errors.New("consumers: fan-out: Handle before Runner")
	}
	p := f.partition(ctx, part)
	p.handling.Lock()
	defer p.handling.Unlock()
	if err := f.presence.subscribe(ctx, f.Redis, f.log); err != nil {
		return fmt.Errorf("consumers: fan-out: %w", err)
	}
	if err := f.syncMembers(ctx, p); err != nil {
		return err
	}

	// The prev of the first message of a group in this assignment: the
	// persister's, where it is certain, else unknown. The state changes of
	// the batch are staged until it is published.
	p.prev.begin(recs[0].Offset)
	prev := map[string]int64{}
	first := map[string]int64{}
	for i := range recs {
		gid := recs[i].Event.Gid
		if _, known := p.prev.lookup(gid); !known {
			if _, ok := first[gid]; !ok {
				first[gid] = recs[i].Offset
			}
		}
	}
	if len(first) > 0 {
		got, err := f.Redis.PersistedPrevs(ctx, GroupPersister, topics.Messages, part, p.prev.unseenSince(), first)
		if err != nil {
			return fmt.Errorf("consumers: fan-out: %w", err)
		}
		maps.Copy(prev, got)
	}

	// Decide every record.
	now := time.Now().UnixMilli()
	maxAge := f.MaxPushAge.Milliseconds()
	claims := map[string]claim{}
	snapshots := map[string][]memberOf{}
	var out []outgoing
	var dups, stale int64
	// Per group, its last message when that is a stale one, from earlier
	// batches and this one (-1: a push of this batch names it).
	staleLast := map[string]int64{}
	p.members.mu.RLock()
	joins := p.members.takeJoins()
	for i := range recs {
		m, msgid := &recs[i].Event, recs[i].Offset
		if m.ClientMsgID != "" {
			key := m.Gid + "\x00" + m.Sender + "\x00" + m.ClientMsgID
			c, ok := claims[key]
			if !ok {
				c, ok = p.claims.get(key, now)
			}
			if ok && c.msgid < msgid && store.SameSend(m.SentAt, c.sentAt, f.dedupWin) {
				// Not pushed, but still the group's last record: the
				// persister decides the send against a claim that expires
				// by its own clock, and may keep it. The next message
				// names it as prev, so a client without it pulls and
				// gets what the persister kept.
				dups++
				prev[m.Gid] = msgid
				continue
			}
			claims[key] = claim{msgid: msgid, sentAt: m.SentAt}
		}
		last, known := prev[m.Gid]
		if !known {
			last, known = p.prev.lookup(m.Gid)
		}
		prev[m.Gid] = msgid
		// sent_at as the dedup rule takes it: now less one near MinInt64
		// overflowed, and so ancient a message read as one from the future.
		if now-store.ClaimSentAt(m.SentAt) > maxAge {
			stale++
			staleLast[m.Gid] = msgid
			continue
		}
		_, inBatch := staleLast[m.Gid]
		if _, earlier := p.staleLast[m.Gid]; inBatch || earlier {
			staleLast[m.Gid] = -1 // a push names it as prev
		}
		pm := protocol.Message{Gid: m.Gid, MsgID: msgid, Sender: m.Sender, SentAt: m.SentAt, Cmid: m.ClientMsgID, Body: string(m.Body)}
		if known {
			pm.Prev = &last
		}
		group, ok := snapshots[m.Gid]
		if !ok {
			group = p.members.snapshot(m.Gid)
			snapshots[m.Gid] = group
		}
		out = append(out, outgoing{msgid: msgid, json: protocol.Marshal(pm), group: group})
	}
	// A stale message the fan-out has caught up with is its group's last
	// for now: no push names it as prev, so its members are told to sync.
	// The ones of earlier batches wait for that in the partition's state.
	var missed []string
	caughtUp := false
	if last := recs[len(recs)-1]; last.End > 0 && last.Offset+1 >= last.End { // End 0: not known
		caughtUp = true
		all := maps.Clone(p.staleLast)
		for gid, id := range staleLast {
			all[gid] = id
		}
		missed = staleAudience(all, p.members)
	}
	p.members.mu.RUnlock()
	late, told, err := f.projectedJoiners(ctx, p, lateJoins(joins, p.prev, time.Now()))
	if err != nil {
		return err
	}
	fail := func(err error) error {
		p.members.restoreJoins(told) // told with the batch's retry
		return err
	}

	var pushes int64
	var batches []store.NodePushes
	if len(out) > 0 || len(late) > 0 || len(missed) > 0 {
		nodes, err := f.presence.lookup(ctx, f.Redis, append(append(recipients(out), late...), missed...))
		if err != nil {
			return fail(fmt.Errorf("consumers: fan-out: presence: %w", err))
		}
		batches, pushes = route(out, nodes)
		batches = append(batches, resyncs(late, nodes, protocol.ResyncJoined)...)
		batches = append(batches, resyncs(missed, nodes, protocol.ResyncStale)...)
		unheard, err := f.Redis.PublishPushesAll(ctx, batches)
		if err != nil {
			return fail(fmt.Errorf("consumers: fan-out: %w", err))
		}
		f.stats.unheard.Add(int64(unheard))
	}

	if caughtUp {
		clear(p.staleLast)
	} else {
		for gid, id := range staleLast {
			if id < 0 {
				delete(p.staleLast, gid)
			} else {
				p.staleLast[gid] = id
			}
		}
	}
	p.prev.commit(prev, recs[len(recs)-1].Offset)
	for key, c := range claims {
		p.claims.put(key, c, now, f.dedupWin)
	}
	f.stats.messages.Add(int64(len(recs)))
	f.stats.dups.Add(dups)
	f.stats.stale.Add(stale)
	f.stats.lateJoins.Add(int64(len(late)))
	f.stats.pushes.Add(pushes)
	f.stats.batches.Add(int64(len(batches)))
	return nil
}
