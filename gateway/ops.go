package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// How long a send claim stays pending, and how long an accepted send's
// msgid is remembered for resends.
const (
	sendInflight = 10 * time.Second
	sendKeep     = 24 * time.Hour
	pendingWait  = 2 * time.Second // a resend waits this long for the send in flight
)

// do runs one request of user uid and returns the answer frame.
func (g *Gateway) do(ctx context.Context, uid string, r *protocol.Request) (any, *protocol.Error) {
	switch r.Op {
	case protocol.OpSend:
		return g.send(ctx, uid, r)
	case protocol.OpAck, protocol.OpRead:
		return g.cursor(ctx, uid, r)
	case protocol.OpCursors:
		return g.cursors(ctx, uid, r)
	case protocol.OpPull, protocol.OpSync:
		return g.catchingUp(ctx, uid, r)
	case protocol.OpReadCounts:
		return g.readCounts(ctx, uid, r)
	case protocol.OpWhoRead:
		return g.whoRead(ctx, uid, r)
	case protocol.OpAuth:
		return nil, errAuthed
	}
	return nil, protocol.Errorf(protocol.CodeUnknownOp, "unknown op %q", r.Op)
}

func (g *Gateway) send(ctx context.Context, uid string, r *protocol.Request) (any, *protocol.Error) {
	accepted := func(id int64) *protocol.Accepted {
		return &protocol.Accepted{Op: protocol.OpAccepted, ID: r.ID, Gid: r.Gid, Cmid: r.Cmid, MsgID: id}
	}
	if !g.admit.enter() {
		g.metrics.overloaded.Add(1)
		g.cfg.Metrics.Overloaded()
		return nil, protocol.Errorf(protocol.CodeOverloaded, "the server has more sends than it can take in time; retry in a second with the same cmid")
	}
	// What the bound judges is the send's own work: not the wait for a
	// send of the same cmid in flight, which one client's resends make.
	var waited time.Duration
	start := time.Now()
	defer func() { g.admit.leave(time.Since(start) - waited) }()
	built, perr := g.membersFence(ctx, r.Gid)
	if perr != nil {
		return nil, perr
	}
	var claim store.SendClaim
	for wait := 0; ; wait++ {
		c, err := g.cfg.Redis.BeginSend(ctx, r.Gid, uid, r.Cmid, sendInflight, built)
		if err != nil {
			return nil, g.stateErr(err, "send claim", r.Gid)
		}
		if c.State == store.SendDone {
			// A resend: the first send's msgid, also to one who left
			// since (the answer to the first send was lost).
			return accepted(c.MsgID), nil
		}
		if perr := g.notMember(ctx, c.Member, r.Gid, uid); perr != nil {
			return nil, perr
		}
		if c.Member.State != store.MemberJoined {
			return nil, g.leftSender(ctx, r.Gid, uid)
		}
		if c.State == store.SendRemoving {
			return nil, protocol.Errorf(protocol.CodeUnavailable, "you are being removed from %s; retry in a second", r.Gid)
		}
		if c.State == store.SendClaimed {
			claim = c
			break
		}
		// Another send with this cmid is in flight (the client resent it):
		// wait for its answer, checking less often as it takes longer, so
		// that resends to an overloaded gateway do not add to its load.
		if waited >= pendingWait {
			return nil, protocol.Errorf(protocol.CodeUnavailable, "a send with cmid %s is still in flight; retry with the same cmid", r.Cmid)
		}
		d := 320 * time.Millisecond
		if wait < 5 {
			d = 10 * time.Millisecond << wait // 10, 20, 40, 80, 160 ms
		}
		waited += d
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, g.unavailable("send", ctx.Err())
		case <-t.C:
		}
	}
	msg := schema.Message{Gid: r.Gid, Sender: uid, ClientMsgID: r.Cmid, SentAt: time.Now().UnixMilli(), Body: []byte(r.Body)}
	// Once claimed, the send runs to its end even if the client goes away:
	// a produce cut short may still be written, and a claim given back for
	// it would let the resend write the message again.
	stop := g.holdSend(ctx, r.Gid, uid, r.Cmid, claim.Attempt)
	id, err := g.cfg.Producer.SendMessage(context.WithoutCancel(ctx), &msg)
	stop()
	if err != nil {
		if aerr := g.cfg.Redis.AbortSend(context.WithoutCancel(ctx), r.Gid, uid, r.Cmid, claim.Attempt); aerr != nil {
			g.log.Warn("cannot release a send claim; a resend waits for it to expire", "err", aerr)
		}
		return nil, g.unavailable("send", err)
	}
	g.cfg.Metrics.Sent(1)
	g.metrics.sends.Add(1)
	first, err := g.cfg.Redis.FinishSend(context.WithoutCancel(ctx), r.Gid, uid, r.Cmid, claim.Attempt, id, sendKeep)
	if err != nil {
		// The message is accepted; only a resend's answer is affected, and
		// the persister drops the duplicate a resend would produce.
		g.log.Warn("cannot record an accepted send", "gid", r.Gid, "msgid", id, "err", err)
	}
	if first != id {
		g.log.Info("a resend was produced twice; answering with the first record", "gid", r.Gid, "cmid", r.Cmid, "first", first, "second", id)
	}
	return accepted(first), nil
}

// leftSender refuses a send of uid, who left gid, unless uid's join back
// is written but not yet projected: then the answer is unavailable, which
// clients retry, not left_group, which they give up on.
func (g *Gateway) leftSender(ctx context.Context, gid, uid string) *protocol.Error {
	return g.unlessJoining(ctx, gid, uid, "added back to",
		protocol.Errorf(protocol.CodeLeft, "you left %s; you cannot send to it", gid))
}

// holdSend renews attempt's send claim of (gid, uid, cmid) every third of
// sendInflight until the returned stop is called, so that a produce slower
// than the claim does not let a resend produce a second record.
func (g *Gateway) holdSend(ctx context.Context, gid, uid, cmid, attempt string) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	t = time.AfterFunc(sendInflight/3, func() {
		if err := g.cfg.Redis.ExtendSend(context.WithoutCancel(ctx), gid, uid, cmid, attempt, sendInflight); err != nil {
			g.log.Warn("cannot renew a send claim", "gid", gid, "cmid", cmid, "err", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			t.Reset(sendInflight / 3)
		}
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}

// cursor handles ack and read: the cursor may not pass the newest message
// the member can see; a cursor at or below the current one is answered
// without writing anything.
func (g *Gateway) cursor(ctx context.Context, uid string, r *protocol.Request) (any, *protocol.Error) {
	built, perr := g.membersFence(ctx, r.Gid)
	if perr != nil {
		return nil, perr
	}
	cur, err := g.cfg.Redis.CursorState(ctx, r.Gid, uid, built)
	if err != nil {
		return nil, g.stateErr(err, "cursors", r.Gid)
	}
	upto := *r.Upto
	if perr := g.judgeCursor(ctx, uid, r.Op, r.Gid, upto, cur); perr != nil {
		return nil, perr
	}
	now := time.Now().UnixMilli()
	if r.Op == protocol.OpAck {
		if upto > cur.Ack {
			err = g.cfg.Producer.SendAcks(ctx, schema.Ack{Gid: r.Gid, Uid: uid, Upto: upto, At: now})
			g.metrics.acks.Add(1)
		}
	} else if upto > cur.Read {
		err = g.cfg.Producer.SendReceipts(ctx, schema.Receipt{Gid: r.Gid, Uid: uid, Upto: upto, At: now})
		g.metrics.reads.Add(1)
	}
	if err != nil {
		return nil, g.unavailable(r.Op, err)
	}
	return &protocol.OK{Op: protocol.OpOK, ID: r.ID}, nil
}

// judgeCursor refuses uid's op (ack or read) of gid up to upto, given
// uid's cursor state in gid, as not_member, left_group or beyond_head; nil
// when it may be taken. An ack or read frame and each entry of a cursors
// frame are judged alike.
func (g *Gateway) judgeCursor(ctx context.Context, uid, op, gid string, upto int64, cur store.CursorState) *protocol.Error {
	m := cur.Member
	if perr := g.notMember(ctx, m, gid, uid); perr != nil {
		return perr
	}
	if m.State == store.MemberLeft && upto > m.LeftAt {
		return g.unlessJoining(ctx, gid, uid, "added back to",
			protocol.Errorf(protocol.CodeLeft, "you left %s at msgid %d; you cannot %s past it", gid, m.LeftAt, op))
	}
	return g.checkHead(ctx, gid, cur.Head, upto, op)
}

// checkHead refuses a cursor past the group's newest message. The Redis head
// lags the log by the persister's delay, so a cursor above it is checked
// against the log itself before it is refused: it must be in the log, and
// be a message of the group, not of another group of its partition. Unless
// the persister has stored it already (see persistedHead): then the head
// in Redis tells.
func (g *Gateway) checkHead(ctx context.Context, gid string, head, upto int64, op string) *protocol.Error {
	if upto <= head {
		return nil
	}
	beyond := protocol.Errorf(protocol.CodeBeyondHead, "%s upto %d is beyond the newest message of %s (%d) or not one of its messages; %s up to a msgid of %s you received",
		op, upto, gid, head, op, gid)
	if h, ok := g.persistedHead(ctx, gid, upto); ok {
		if upto <= h {
			return nil
		}
		return beyond
	}
	logHead, err := g.cfg.Producer.HeadAtLeast(ctx, gid, upto)
	if err != nil {
		return g.unavailable("head", err)
	}
	if upto <= logHead {
		ok, err := g.cfg.Producer.IsMessageOf(ctx, gid, upto)
		if err != nil {
			return g.unavailable("head", err)
		}
		if ok {
			return nil
		}
	}
	return beyond
}

// persistedHead returns gid's head in Redis, read after the persister's
// position was seen past upto in gid's partition; ok false when it was not
// (or either could not be read). The persister saves its position only
// once the heads hold every message below it, so a head read after that
// tells whether upto is a message of gid, without asking the broker, as a
// member may make the gateway do with every frame. The position is read at
// most every endsGap, shared with the syncs' checks.
func (g *Gateway) persistedHead(ctx context.Context, gid string, upto int64) (head int64, ok bool) {
	part, err := g.cfg.Producer.Partition(ctx, topics.Messages, gid)
	if err != nil {
		return 0, false
	}
	stored, err := g.storedRead.after(ctx, g.since()-endsGap, g.since, g.reads.stored)
	if err != nil || lacks(stored, part, upto+1) {
		return 0, false
	}
	if head, err = g.cfg.Redis.Head(ctx, gid); err != nil {
		return 0, false
	}
	return head, true
}

func (g *Gateway) pull(ctx context.Context, uid string, r *protocol.Request) (any, *protocol.Error) {
	m, perr := g.member(ctx, uid, r.Gid)
	if perr != nil {
		return nil, perr
	}
	after := m.JoinedAt // a member sees nothing from before joining
	if r.After != nil && *r.After > after {
		after = *r.After
	}
	var page history.Page
	var err error
	ctx = history.WithUser(ctx, uid) // one user's deep pulls take two reads of ClickHouse at most
	if r.Before != nil {
		before := *r.Before
		if m.State == store.MemberLeft {
			before = min(before, m.LeftAt+1) // nothing after leaving
		}
		page, err = g.cfg.History.PullBefore(ctx, r.Gid, after, before, r.Limit)
	} else {
		page, err = g.cfg.History.Pull(ctx, r.Gid, after, r.Limit)
	}
	if err != nil {
		if errors.Is(err, history.ErrNoHistory) || errors.Is(err, history.ErrIncomplete) {
			return nil, protocol.Errorf(protocol.CodeUnavailable, "%v", err)
		}
		if errors.Is(err, history.ErrBusy) { // load, not a fault: no log line per page
			return nil, protocol.Errorf(protocol.CodeOverloaded, "too many pulls of older messages at once (yours, or this server's); retry in a second")
		}
		return nil, g.unavailable("pull", err)
	}
	out := &protocol.Page{Op: protocol.OpPage, ID: r.ID, Gid: r.Gid, After: after, Before: r.Before, Head: page.Head, More: page.More,
		Msgs: make([]protocol.Message, 0, len(page.Messages))}
	for _, msg := range page.Messages {
		if !m.Sees(msg.MsgID) {
			out.More = false // a member who left sees nothing after leaving
			break
		}
		out.Msgs = append(out.Msgs, toProtocol(&msg, nil))
	}
	if cut := pageCut(out.Msgs, r.Before != nil); cut != nil {
		out.Msgs, out.More = cut, true
	}
	if m.State == store.MemberLeft {
		out.Head = g.leftHead(ctx, r.Gid, m, out.Head)
		if n := len(out.Msgs); r.Before == nil && n > 0 && out.Msgs[n-1].MsgID >= out.Head {
			out.More = false
		}
	}
	g.metrics.pulls.Add(1)
	return out, nil
}

// maxPageBytes bounds the bodies of one page: a page of a thousand large
// messages would be tens of megabytes to hold in a connection's queue and
// for a client to read in one frame. A client asks again for the rest.
// (What the page reads from the window is bounded alike, in history.)
const maxPageBytes = history.PageBytes

// pageCut returns msgs cut to maxPageBytes of bodies (one message at
// least), or nil if they fit. A page after a cursor keeps its oldest
// messages, a page before one (scrolling up) its newest, so either way the
// page stays next to the cursor it was asked from.
func pageCut(msgs []protocol.Message, before bool) []protocol.Message {
	size := 0
	for i := range msgs {
		j := i
		if before {
			j = len(msgs) - 1 - i
		}
		if size += len(msgs[j].Body); size > maxPageBytes && i > 0 {
			if before {
				return msgs[j+1:]
			}
			return msgs[:j]
		}
	}
	return nil
}

func toProtocol(m *schema.Message, prev *int64) protocol.Message {
	return protocol.Message{Gid: m.Gid, MsgID: m.MsgID, Prev: prev, Sender: m.Sender, SentAt: m.SentAt,
		Cmid: m.ClientMsgID, Body: string(m.Body)}
}

func (g *Gateway) unavailable(what string, err error) *protocol.Error {
	g.log.Warn("operation failed", "what", what, "err", err)
	return protocol.Errorf(protocol.CodeUnavailable, "%s is unavailable right now; retry shortly", what)
}
