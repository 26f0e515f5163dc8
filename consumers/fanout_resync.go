package consumers

import (
	"context"
	"fmt"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
)

// What the fan-out tells with a resync frame instead of a push: a joiner
// whose join it learned of after it had handled a message past the join's
// position, and the members of a group whose last message was too old to
// push once it has caught up with the log.

// lateJoins returns the joins the table applied after the fan-out had
// handled a message of their group past the join's position (prev: the
// last one of each group it handled). A join's position is the group's
// head when it was written, and the fan-out waits for the joins written
// before a message only: one sent between the two was not pushed to the
// joiner.
func lateJoins(joins []joinAt, prev *prevTable, now time.Time) []joinAt {
	var late []joinAt
	for _, j := range joins {
		if last, known := prev.lookup(j.gid); j.late || known && last > j.pos {
			if !j.late {
				j.late, j.since = true, now
			}
			late = append(late, j)
		}
	}
	return late
}

// projectedJoiners returns the users of late, each once, whose joins the
// member projection holds, and those joins: told to sync before it holds
// them, a joiner's client would find the group in no sync. The others
// wait in p's table for a later batch (all of them when the look fails),
// maxJoinWait at most: past it they are told anyway (the projection may
// never hold a join whose member left again).
func (f *Fanout) projectedJoiners(ctx context.Context, p *fanPartition, late []joinAt) (uids []string, told []joinAt, err error) {
	if len(late) == 0 {
		return nil, nil, nil
	}
	refs := make([]store.JoinRef, len(late))
	for i, j := range late {
		refs[i] = store.JoinRef{Gid: j.gid, Uid: j.uid, Pos: j.pos}
	}
	ready, err := f.Redis.JoinsProjected(ctx, refs)
	if err != nil {
		p.members.restoreJoins(late)
		return nil, nil, fmt.Errorf("consumers: fan-out: %w", err)
	}
	var waiting []joinAt
	named := map[string]bool{}
	for i, j := range late {
		if !ready[i] && time.Since(j.since) < maxJoinWait {
			waiting = append(waiting, j)
			continue
		}
		told = append(told, j)
		if !named[j.uid] {
			named[j.uid] = true
			uids = append(uids, j.uid)
		}
	}
	p.members.restoreJoins(waiting)
	return uids, told, nil
}

// joinsTick is how often a partition between batches looks for joins to
// tell (tellJoinsBetweenBatches).
const joinsTick = time.Second

// tellJoinsTimeout bounds one telling between batches: a batch that comes
// meanwhile waits for it.
const tellJoinsTimeout = 2 * time.Second

// tellJoinsBetweenBatches tells, while no batch comes, the joiners whose
// joins only a batch would take otherwise: a join the follower applied
// after the partition's last message, or one that waits for the member
// projection. In a quiet partition its joiner would wait for the next
// message of any group of the partition.
func (f *Fanout) tellJoinsBetweenBatches(ctx context.Context, p *fanPartition) {
	tick := time.NewTicker(joinsTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !p.handling.TryLock() {
			continue // a batch is handled: it takes them
		}
		// Bounded: the partition's next batch waits for p.handling.
		tctx, cancel := context.WithTimeout(ctx, tellJoinsTimeout)
		err := f.tellJoins(tctx, p)
		cancel()
		if err != nil && ctx.Err() == nil {
			f.log.Warn("telling late joiners to sync failed; retried in a second", "partition", p.id, "err", err)
		}
		p.handling.Unlock()
	}
}

// tellJoins sends the late joins the table holds, once projected, a resync;
// p.handling must be held.
func (f *Fanout) tellJoins(ctx context.Context, p *fanPartition) error {
	p.members.mu.RLock()
	p.members.joinsMu.Lock()
	tracking := p.members.tracking // else no batch has synced with the table yet
	p.members.joinsMu.Unlock()
	var joins []joinAt
	if tracking {
		joins = p.members.takeJoins()
	}
	p.members.mu.RUnlock()
	late, told, err := f.projectedJoiners(ctx, p, lateJoins(joins, p.prev, time.Now()))
	if err != nil || len(late) == 0 {
		return err
	}
	nodes, err := f.presence.lookup(ctx, f.Redis, late)
	if err == nil {
		_, err = f.Redis.PublishPushesAll(ctx, resyncs(late, nodes, protocol.ResyncJoined))
	}
	if err != nil {
		p.members.restoreJoins(told)
		return fmt.Errorf("consumers: fan-out: %w", err)
	}
	f.stats.lateJoins.Add(int64(len(late)))
	return nil
}

// tellStaleOnLeave tells, when an assignment ends before the fan-out
// caught up with the log, the members of the groups whose last message it
// found too old to push: the partition's next owner starts past those
// messages and would never tell them. Told early, they pull what is there;
// a later stale message is the next owner's to tell.
func (f *Fanout) tellStaleOnLeave(p *fanPartition) {
	p.handling.Lock() // the batch being handled, if any, ends first
	defer p.handling.Unlock()
	if len(p.staleLast) == 0 {
		return
	}
	p.members.mu.RLock()
	uids := staleAudience(p.staleLast, p.members)
	p.members.mu.RUnlock()
	clear(p.staleLast)
	if len(uids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nodes, err := f.presence.lookup(ctx, f.Redis, uids)
	if err == nil {
		_, err = f.Redis.PublishPushesAll(ctx, resyncs(uids, nodes, protocol.ResyncStale))
	}
	if err != nil {
		f.log.Warn("telling the members of groups whose last message was too old to push failed as the partition was let go; they learn of it with the group's next message", "partition", p.id, "members", len(uids), "err", err)
	}
}

// staleAudience returns the members who see the message of each group of
// last (gid -> msgid; -1: none), each once; t.mu must be held.
func staleAudience(last map[string]int64, t *memberTable) []string {
	var uids []string
	seen := map[string]bool{}
	for gid, msgid := range last {
		if msgid < 0 {
			continue
		}
		for _, mo := range t.snapshot(gid) {
			if !seen[mo.uid] && mo.m.Sees(msgid) {
				seen[mo.uid] = true
				uids = append(uids, mo.uid)
			}
		}
	}
	return uids
}

// resyncs returns, for the nodes where uids are online, a resync frame to
// them with reason: they sync and pull what they missed.
func resyncs(uids []string, nodes map[string][]string, reason string) []store.NodePushes {
	if len(uids) == 0 {
		return nil
	}
	frame := protocol.Marshal(protocol.Resync{Op: protocol.OpResync, Reason: reason})
	byNode := map[string][]string{}
	for _, uid := range uids {
		for _, node := range nodes[uid] {
			byNode[node] = append(byNode[node], uid)
		}
	}
	out := make([]store.NodePushes, 0, len(byNode))
	for node, us := range byNode {
		out = append(out, store.NodePushes{Node: node, Batch: store.PushBatch{Items: []store.PushItem{{Msg: frame, Uids: us}}}})
	}
	return out
}
