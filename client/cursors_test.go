package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// cursorFrames counts the frames p got that move cursors: ack, read and
// cursors frames.
func (p *peer) cursorFrames() (acks, reads, cursors int) {
	return len(p.requests(protocol.OpAck)), len(p.requests(protocol.OpRead)), len(p.requests(protocol.OpCursors))
}

// atHeads reports how many of msgs (one a group) alice's ack and read
// cursors at p have reached, of 2 x len(msgs).
func atHeads(p *peer, msgs []protocol.Message) int {
	n := 0
	for _, m := range msgs {
		for _, op := range []string{protocol.OpAck, protocol.OpRead} {
			if slices.Contains(p.cursors(op, m.Gid, "alice"), m.MsgID) {
				n++
			}
		}
	}
	return n
}

// postEach posts a message to each of n groups of manyGroups, waits until
// c has delivered them all, and marks them read.
func postEach(t *testing.T, p *peer, c *Client, rec *recorder, n int) []protocol.Message {
	t.Helper()
	var msgs []protocol.Message
	for i := range n {
		msgs = append(msgs, p.post(fmt.Sprint("g", i), "bob", "hi"))
	}
	waitFor(t, "a message of every group", func() bool { return rec.len() == n })
	for _, m := range msgs {
		if err := c.MarkRead(context.Background(), m.Gid, m.MsgID); err != nil {
			t.Fatal(err)
		}
	}
	return msgs
}

// awaitHeads waits up to d for every ack and read of msgs at p, and
// returns how long it took and how many there were by then.
func awaitHeads(p *peer, msgs []protocol.Message, d time.Duration) (time.Duration, int) {
	start := time.Now()
	for time.Since(start) < d {
		if n := atHeads(p, msgs); n == 2*len(msgs) {
			return time.Since(start), n
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start), atHeads(p, msgs)
}

// A user with a message in each of 300 groups acks and marks them read in
// a frame or two, at once: one frame a group, at the client's 100 frames a
// second, had the last group's cursors wait 5 s, and a user with messages
// in more than 100 groups a second ack later and later.
func TestTheAckLoopSendsTheCursorsOfManyGroupsInFewFrames(t *testing.T) {
	const n = 300
	p := newPeer(t, manyGroups(n))
	p.set(func(p *peer) {
		p.maxBody, p.maxCursors, p.frameRate, p.frameBurst = 16384, protocol.MaxCursors, 200, 400
	})
	c, rec := dial(t, p, "alice", nil)
	msgs := postEach(t, p, c, rec, n)
	took, got := awaitHeads(p, msgs, 15*time.Second)
	acks, reads, cursors := p.cursorFrames()
	if got != 2*n || took > time.Second || acks+reads+cursors > 4 {
		t.Errorf("%d of %d acks and reads at their group's message after %v, in %d ack, %d read and %d cursors frames; want all within a second, in 4 frames at most",
			got, 2*n, took.Round(time.Millisecond), acks, reads, cursors)
	}
	if st := c.Stats(); st.Acks != n || st.Reads != n || st.CursorFrames != int64(cursors) {
		t.Errorf("stats: %d acks, %d reads, %d cursors frames; want %d, %d and %d", st.Acks, st.Reads, st.CursorFrames, n, n, cursors)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.limited) > 0 {
		t.Errorf("%d frames refused as rate_limited", len(p.limited))
	}
}

// A cursors frame carries at most what the server's authed frame says,
// and costs the client's frame budget what it costs the gateway's: one
// frame more per 100 entries. Charged one frame, the client sent its
// frames of 500 entries faster than a gateway at its rate takes them.
func TestCursorsFramesKeepToTheServersLimitAndRate(t *testing.T) {
	const n = 1200
	p := newPeer(t, manyGroups(n))
	// The client's budget, and the peer's as a gateway's at that rate (the
	// auth and sync frames besides, which the client does not pace).
	p.set(func(p *peer) { p.maxBody, p.maxCursors, p.frameRate, p.frameBurst = 16384, 400, 20, 12 })
	c, rec := dial(t, p, "alice", func(c *Config) { c.FrameRate, c.FrameBurst = 20, 10 })
	msgs := postEach(t, p, c, rec, n)
	took, got := awaitHeads(p, msgs, 10*time.Second)
	if got != 2*n {
		t.Fatalf("%d of %d acks and reads at their group's message after %v", got, 2*n, took.Round(time.Millisecond))
	}
	for _, r := range p.requests(protocol.OpCursors) {
		if k := len(r.Acks) + len(r.Reads); k > 400 {
			t.Errorf("a cursors frame of %d entries; the server takes 400", k)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.limited) > 0 {
		t.Errorf("%d frames refused as rate_limited (%q): the client charged its budget less than the server", len(p.limited), p.limited)
	}
}

// A server before the cursors op (its authed frame has no max_cursors) is
// sent an ack or read frame a group, as before, and never a cursors frame,
// which it would refuse as unknown_op.
func TestAServerWithoutCursorsGetsAFrameAGroup(t *testing.T) {
	const n = 30
	p := newPeer(t, manyGroups(n))
	p.set(func(p *peer) { p.maxBody = 16384 })
	c, rec := dial(t, p, "alice", nil)
	msgs := postEach(t, p, c, rec, n)
	if took, got := awaitHeads(p, msgs, 5*time.Second); got != 2*n {
		t.Fatalf("%d of %d acks and reads at their group's message after %v", got, 2*n, took.Round(time.Millisecond))
	}
	if acks, reads, cursors := p.cursorFrames(); acks != n || reads != n || cursors != 0 {
		t.Errorf("%d ack, %d read and %d cursors frames; want %d, %d and none", acks, reads, cursors, n, n)
	}
}

// A lone ack goes in an ack frame, even to a server that takes cursors
// frames: the gateway answers ack frames in Redis round trips shared
// with other connections', where each cursors frame has one of its own
// (a cursors frame of one entry cost chatd 5-10% more CPU at 300 msg/s
// into groups of 50).
func TestALoneAckGoesInAnAckFrame(t *testing.T) {
	p := newPeer(t, manyGroups(1))
	p.set(func(p *peer) { p.maxBody, p.maxCursors = 16384, protocol.MaxCursors })
	c, rec := dial(t, p, "alice", nil)
	m := p.post("g0", "bob", "hi")
	waitFor(t, "the message", func() bool { return rec.len() == 1 })
	waitFor(t, "its ack", func() bool { return slices.Contains(p.cursors(protocol.OpAck, m.Gid, "alice"), m.MsgID) })
	if err := c.MarkRead(context.Background(), m.Gid, m.MsgID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "its read", func() bool { return slices.Contains(p.cursors(protocol.OpRead, m.Gid, "alice"), m.MsgID) })
	if acks, reads, cursors := p.cursorFrames(); acks != 1 || reads != 1 || cursors != 0 {
		t.Errorf("%d ack, %d read and %d cursors frames; want 1, 1 and none", acks, reads, cursors)
	}
}

// An entry of a cursors frame the server refuses is handled as its one
// group frame's refusal: refused for good (the member was removed), it is
// reported and not owed, and the other entries of the frame are taken.
func TestAnEntryRefusedInACursorsFrameIsReportedAndNotOwed(t *testing.T) {
	p := newPeer(t, manyGroups(3))
	p.set(func(p *peer) { p.maxBody, p.maxCursors = 16384, protocol.MaxCursors })
	c, rec := dial(t, p, "alice", func(cfg *Config) {
		cfg.AckEvery, cfg.AckInterval = 1000, time.Hour // acked only when flushed
	})
	var msgs []protocol.Message
	for i := range 3 {
		msgs = append(msgs, p.post(fmt.Sprint("g", i), "bob", "hi"))
	}
	waitFor(t, "the pushes", func() bool { return rec.len() == 3 })
	p.set(func(p *peer) { delete(p.groups["g1"].members, "alice") }) // removed before the ack goes out
	err := c.flush(context.Background())
	if err == nil || !strings.Contains(err.Error(), string(protocol.CodeNotMember)) || !strings.Contains(err.Error(), "ack g1") {
		t.Fatalf("flush: %v, want g1's ack refused as not_member", err)
	}
	for _, i := range []int{0, 2} {
		if got := p.cursors(protocol.OpAck, msgs[i].Gid, "alice"); !slices.Equal(got, []int64{msgs[i].MsgID}) {
			t.Errorf("acks of %s: %v, want [%d]", msgs[i].Gid, got, msgs[i].MsgID)
		}
	}
	if _, _, cursors := p.cursorFrames(); cursors != 1 {
		t.Errorf("%d cursors frames, want 1", cursors)
	}
	closeOwingNothing(t, c, "g1")
}
