package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

// A cursors frame acks and marks read up to protocol.MaxCursors groups:
// a user with new messages in hundreds of groups a second would spend a
// frame of its rate on each group's ack and read. Each entry is judged as
// its one-group frame is (judgeCursor), but the cursor states of all its
// groups are read in one Redis round trip, and the records of the entries
// taken are written in one produce call a topic, acks and receipts at
// once. A refused entry writes nothing and is named in the answer; the
// others are taken.

// cursorsLooks is how many entries of one cursors frame are judged at once
// where judging takes more than the shared read: a cursor above the
// store's head is checked against the log, a refusal looks for a join in
// flight.
const cursorsLooks = 16

// cursorEntry is one entry of a cursors frame as it is judged.
type cursorEntry struct {
	op, gid string
	upto    int64
	ask     int // its group's index in the round trip's asks
	perr    *protocol.Error
}

// cursors handles a cursors frame: every entry is taken or refused, and
// the answer is ok, naming the refused ones.
func (g *Gateway) cursors(ctx context.Context, uid string, r *protocol.Request) (any, *protocol.Error) {
	es := make([]cursorEntry, 0, len(r.Acks)+len(r.Reads))
	var asks []store.CursorAsk
	var fenced []*protocol.Error
	at := map[string]int{}
	for _, l := range []struct {
		op   string
		list []protocol.Cursor
	}{{protocol.OpAck, r.Acks}, {protocol.OpRead, r.Reads}} {
		for _, c := range l.list {
			i, ok := at[c.Gid]
			if !ok {
				i = len(asks)
				at[c.Gid] = i
				built, perr := g.membersFence(ctx, c.Gid)
				asks = append(asks, store.CursorAsk{Gid: c.Gid, Built: built})
				fenced = append(fenced, perr)
			}
			es = append(es, cursorEntry{op: l.op, gid: c.Gid, upto: *c.Upto, ask: i})
		}
	}
	sts, errs := g.cfg.Redis.CursorStates(ctx, uid, asks)
	var unavailable *protocol.Error // one log line for a round trip that failed, not one per group
	looks := make(chan struct{}, cursorsLooks)
	var wg sync.WaitGroup
	for i := range es {
		e := &es[i]
		st, err := sts[e.ask], errs[e.ask]
		switch {
		case fenced[e.ask] != nil:
			e.perr = fenced[e.ask]
		case errors.Is(err, store.ErrReplaying):
			e.perr = g.stateErr(err, "cursors", e.gid)
		case err != nil:
			if unavailable == nil {
				unavailable = g.unavailable("cursors", err)
			}
			e.perr = unavailable
		case st.Member.State == store.MemberJoined && e.upto <= st.Head:
			// Taken without a look further: judgeCursor would say nil.
		default:
			looks <- struct{}{}
			wg.Go(func() {
				defer func() { <-looks }()
				e.perr = g.judgeCursor(ctx, uid, e.op, e.gid, e.upto, st)
			})
		}
	}
	wg.Wait()
	g.writeCursors(ctx, uid, es, sts)
	out := &protocol.OK{Op: protocol.OpOK, ID: r.ID}
	for _, e := range es {
		if e.perr != nil {
			out.Refused = append(out.Refused, protocol.Refusal{Op: e.op, Gid: e.gid, Upto: e.upto, Code: e.perr.Code, Message: e.perr.Message})
		}
	}
	return out, nil
}

// writeCursors writes the records of the entries taken that move a cursor,
// acks and receipts in one produce call each, at once; an entry whose
// write failed is refused as unavailable.
func (g *Gateway) writeCursors(ctx context.Context, uid string, es []cursorEntry, sts []store.CursorState) {
	now := time.Now().UnixMilli()
	var acks []schema.Ack
	var receipts []schema.Receipt
	var ackAt, readAt []int
	for i, e := range es {
		switch st := sts[e.ask]; {
		case e.perr != nil:
		case e.op == protocol.OpAck && e.upto > st.Ack:
			acks = append(acks, schema.Ack{Gid: e.gid, Uid: uid, Upto: e.upto, At: now})
			ackAt = append(ackAt, i)
		case e.op == protocol.OpRead && e.upto > st.Read:
			receipts = append(receipts, schema.Receipt{Gid: e.gid, Uid: uid, Upto: e.upto, At: now})
			readAt = append(readAt, i)
		}
	}
	var ackErr, readErr error
	var wg sync.WaitGroup
	if len(acks) > 0 && len(receipts) > 0 { // at once: the two wait for their own topic's batch
		wg.Go(func() { ackErr = g.cfg.Producer.SendAcks(ctx, acks...) })
	} else if len(acks) > 0 {
		ackErr = g.cfg.Producer.SendAcks(ctx, acks...)
	}
	if len(receipts) > 0 {
		readErr = g.cfg.Producer.SendReceipts(ctx, receipts...)
	}
	wg.Wait()
	for _, w := range []struct {
		op  string
		err error
		at  []int
	}{{protocol.OpAck, ackErr, ackAt}, {protocol.OpRead, readErr, readAt}} {
		if w.err == nil {
			continue
		}
		perr := g.unavailable(w.op, w.err)
		for _, i := range w.at {
			es[i].perr = perr
		}
	}
	if ackErr == nil {
		g.metrics.acks.Add(int64(len(acks)))
	}
	if readErr == nil {
		g.metrics.reads.Add(int64(len(receipts)))
	}
}
