package consumers

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// GroupReceiptNotifier is the receipt notifier's consumer group.
const GroupReceiptNotifier = "chat.receipt-notifier"

// ReceiptNotifier pushes new read counts to the online senders of the
// messages that read receipts touched, coalesced: at most one "receipts"
// frame per group per sender per Interval, whatever the number of readers.
// Groups whose audience is larger than PollOnlyAbove get no pushes: their
// senders poll with read_counts. The audience is of the messages the update
// covers: members who left before them, or joined after, do not count.
//
// It reads chat.receipts from its end (a new group starts there: old
// receipts need no live update) and keeps nothing durable. Handle only
// marks groups dirty; Run publishes every Interval.
type ReceiptNotifier struct {
	Redis         *store.Redis  // required
	Interval      time.Duration // default 1s
	PollOnlyAbove int           // default 1000 members
	Recent        int           // most messages one update covers; default 200
	Logger        *slog.Logger

	mu    sync.Mutex
	dirty map[string]span             // gid -> messages whose counts may have changed
	last  map[string]map[string]int64 // gid -> uid -> read cursor last seen; forgotten with a quiet group
	sent  map[string]time.Time        // gid -> when its last update went out

	frames atomic.Int64
}

// span is the msgids (lo, hi] of a group whose read counts changed, and the
// read cursors the projection must reach before the counts are computed.
type span struct {
	lo, hi int64
	need   map[string]int64 // uid -> upto
	waits  int              // flushes in a row that could not render it
}

func (s span) merge(o span) span {
	if s.need == nil {
		return o
	}
	s.lo, s.hi, s.waits = min(s.lo, o.lo), max(s.hi, o.hi), max(s.waits, o.waits)
	for uid, upto := range o.need {
		s.need[uid] = max(s.need[uid], upto)
	}
	return s
}

var _ Handler[schema.Receipt] = (*ReceiptNotifier)(nil)

func (n *ReceiptNotifier) setDefaults() {
	if n.Interval == 0 {
		n.Interval = time.Second
	}
	if n.PollOnlyAbove == 0 {
		n.PollOnlyAbove = 1000
	}
	if n.Recent == 0 {
		n.Recent = 200
	}
	if n.Logger == nil {
		n.Logger = slog.Default()
	}
}

// Runner returns the notifier's runner on chat.receipts. Run the notifier
// itself (Run) beside it.
func (n *ReceiptNotifier) Runner(b Base) (*Runner[schema.Receipt], error) {
	if n.Redis == nil {
		return nil, errors.New("consumers: the receipt notifier needs Redis")
	}
	n.setDefaults()
	n.mu.Lock()
	n.dirty, n.last, n.sent = map[string]span{}, map[string]map[string]int64{}, map[string]time.Time{}
	n.mu.Unlock()
	cfg := runnerConfig(b, GroupReceiptNotifier, topics.Receipts, schema.DecodeReceipt, Handler[schema.Receipt](n), nil)
	cfg.StartAtEnd = true
	return NewRunner(cfg)
}

// Frames counts the receipts frames published.
func (n *ReceiptNotifier) Frames() int64 { return n.frames.Load() }

// Handle implements Handler: it marks the moved ranges dirty.
func (n *ReceiptNotifier) Handle(ctx context.Context, part int, recs []Record[schema.Receipt]) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range recs {
		ev := &r.Event
		last := n.last[ev.Gid]
		if last == nil {
			last = map[string]int64{}
			n.last[ev.Gid] = last
		}
		old, seen := last[ev.Uid]
		if seen && ev.Upto <= old {
			continue
		}
		last[ev.Uid] = ev.Upto
		lo := old
		if !seen {
			lo = -1 // unknown: the update covers the Recent newest messages up to Upto
		}
		n.dirty[ev.Gid] = n.dirty[ev.Gid].merge(span{lo: lo, hi: ev.Upto, need: map[string]int64{ev.Uid: ev.Upto}})
	}
	return nil
}

// Run publishes the updates until ctx ends: a group's first update goes out
// at once (within a tick, Interval/10), later ones at most once per Interval.
func (n *ReceiptNotifier) Run(ctx context.Context) error {
	n.setDefaults()
	t := time.NewTicker(n.Interval / 10)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := n.flush(ctx, time.Now()); err != nil && ctx.Err() == nil {
			n.Logger.Warn("receipt updates not pushed; senders can ask for counts", "err", err)
		}
	}
}

func (n *ReceiptNotifier) flush(ctx context.Context, now time.Time) error {
	due := map[string]span{}
	n.mu.Lock()
	for gid, s := range n.dirty {
		if now.Sub(n.sent[gid]) >= n.Interval {
			due[gid] = s
			n.sent[gid] = now
			delete(n.dirty, gid)
		}
	}
	for gid, at := range n.sent { // forget quiet groups
		if now.Sub(at) > 10*n.Interval {
			delete(n.sent, gid)
			if _, busy := n.dirty[gid]; !busy {
				// A cursor forgotten makes the next update cover the
				// Recent newest messages: a little more work, once.
				delete(n.last, gid)
			}
		}
	}
	n.mu.Unlock()
	tick := n.Interval / 10
	again := func(gid string, s span, wait time.Duration) { // try again after wait
		n.mu.Lock()
		n.dirty[gid] = n.dirty[gid].merge(s)
		n.sent[gid] = now.Add(wait - n.Interval) // due once wait has passed
		n.mu.Unlock()
	}
	frames := map[string][]byte{} // uid -> frame, per group below
	var items []store.PushItem
	var errs []error
	rendered := map[string]span{}
	for gid, s := range due {
		clear(frames)
		ready, err := n.group(ctx, gid, s, frames)
		if err != nil || !ready {
			// Read again at the next tick, then less and less often, up to
			// once per Interval: a projection far behind, or a failing
			// Redis, is not read for every waiting group at every tick.
			s.waits++
			again(gid, s, min(tick<<min(s.waits-1, 10), n.Interval))
			if err != nil {
				errs = append(errs, err) // and on with the other groups
			}
			continue
		}
		if len(frames) > 0 {
			rendered[gid] = s
		}
		for uid, f := range frames {
			items = append(items, store.PushItem{Msg: f, Uids: []string{uid}})
		}
	}
	if len(items) > 0 {
		if err := n.publish(ctx, items); err != nil {
			for gid, s := range rendered {
				again(gid, s, tick)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// maxHeadWaits is how many flushes a span waits for the group's head to
// reach the newest message read (see group).
const maxHeadWaits = 20

// group renders one receipts frame per sender of the messages in s. It
// reports false, rendering nothing, while the receipt projection has not
// yet applied the receipts that made s dirty, or the persister has not yet
// added the newest message read to the window.
func (n *ReceiptNotifier) group(ctx context.Context, gid string, s span, frames map[string][]byte) (bool, error) {
	inRange, err := n.Redis.WindowUpTo(ctx, gid, s.lo, s.hi, n.Recent)
	if err != nil {
		return false, err
	}
	if (len(inRange) == 0 || inRange[len(inRange)-1].MsgID < s.hi) && s.waits < maxHeadWaits {
		// A member reads what the fan-out pushed, which runs ahead of the
		// persister: the message read may not be in the window yet, and
		// its count would be lost. Wait for the head to reach it (a few
		// times only: the second record of a resend is never persisted).
		head, err := n.Redis.Head(ctx, gid)
		if err != nil {
			return false, err
		}
		if head < s.hi {
			return false, nil
		}
	}
	if len(inRange) == 0 {
		return true, nil
	}
	st, err := n.Redis.ReadState(ctx, gid)
	if err != nil {
		return false, err
	}
	if st.Seeing(inRange[0].MsgID, inRange[len(inRange)-1].MsgID) > n.PollOnlyAbove {
		return true, nil // poll-only group
	}
	for uid, upto := range s.need {
		if st.Reads[uid] < upto {
			return false, nil
		}
	}
	per := map[string][]protocol.ReadCount{}
	for _, m := range inRange {
		read, aud := st.Count(m.MsgID, m.Sender)
		per[m.Sender] = append(per[m.Sender], protocol.ReadCount{MsgID: m.MsgID, Read: read, Audience: aud})
	}
	for sender, counts := range per {
		frames[sender] = protocol.Marshal(protocol.Receipts{Op: protocol.OpReceipts, Gid: gid, Counts: counts})
	}
	return true, nil
}

func (n *ReceiptNotifier) publish(ctx context.Context, items []store.PushItem) error {
	uids := make([]string, 0, len(items))
	for _, it := range items {
		uids = append(uids, it.Uids[0])
	}
	nodes, err := n.Redis.OnlineNodes(ctx, uids)
	if err != nil {
		return err
	}
	byNode := map[string]*store.PushBatch{}
	for _, it := range items {
		for _, node := range nodes[it.Uids[0]] {
			b := byNode[node]
			if b == nil {
				b = &store.PushBatch{}
				byNode[node] = b
			}
			b.Items = append(b.Items, it)
		}
	}
	var all []store.NodePushes
	for node, b := range byNode {
		all = append(all, store.NodePushes{Node: node, Batch: *b})
		n.frames.Add(int64(len(b.Items)))
	}
	_, err = n.Redis.PublishPushesAll(ctx, all)
	return err
}
