package client

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
)

// The client remembers the sends of its last messages, at most a number:
// a second record of one of them is a duplicate, the same record again (a
// retake), another sender's cmid or another group's is not, and the
// oldest is forgotten first. A record past the dedup window of the one
// that holds its key is a new message, and holds the key from then on.
func TestTheClientRemembersItsLastSends(t *testing.T) {
	const win, most = 1000, 1000 // ms, sends
	var s sendSet
	msg := func(id int64, sender, cmid string, sentAt int64) protocol.Message {
		return protocol.Message{Gid: "g1", MsgID: id, Sender: sender, Cmid: cmid, SentAt: sentAt}
	}
	for i := range int64(most) {
		if s.sentBefore(msg(i, "bob", fmt.Sprint("c", i), 0), win, most) {
			t.Fatalf("message %d taken for a second record", i)
		}
	}
	other := msg(most+13, "bob", "c10", 0)
	other.Gid = "g2"
	cases := []struct {
		m    protocol.Message
		want bool
	}{
		{msg(5, "bob", "c5", 0), false},            // the same record again
		{msg(most, "alice", "c5", 0), false},       // another sender's cmid
		{msg(most+1, "bob", "c6", win), true},      // a second record of c6, at the window's edge
		{msg(most+2, "bob", "", 0), false},         // no cmid
		{msg(most+3, "bob", "new", 0), false},      // remembered; the oldest (c0, c1) forgotten
		{msg(most+4, "bob", "c0", 0), false},       // forgotten
		{msg(most+5, "bob", "c3", -win), true},     // still remembered
		{msg(most+6, "bob", "new", 0), true},       // a second record of new
		{msg(most+7, "bob", "c7", win+1), false},   // c7 used again past the window: a new message
		{msg(most+8, "bob", "c7", 2*win), true},    // a second record of that one, not of the first
		{msg(7, "bob", "c7", 0), false},            // the first, delivered again after a retake
		{msg(most+9, "bob", "c8", 1<<62), false},   // a sent_at past 2^53 ms
		{msg(most+10, "bob", "c8", 1<<53), true},   // compared as 2^53, as the server does
		{msg(most+11, "bob", "c9", -1<<62), false}, // and before -2^53
		{msg(most+12, "bob", "c9", -1<<53), true},  // compared as -2^53
		{other, false}, // another group's
	}
	for _, c := range cases {
		if got := s.sentBefore(c.m, win, most); got != c.want {
			t.Errorf("sentBefore(%s msgid %d, %s, %q, sent at %d) = %v, want %v", c.m.Gid, c.m.MsgID, c.m.Sender, c.m.Cmid, c.m.SentAt, got, c.want)
		}
	}
	if len(s.m) != most || len(s.order) != most {
		t.Errorf("the client remembers %d sends (%d in order), want %d", len(s.m), len(s.order), most)
	}
}

// A sender who uses a client_msg_id again past the server's dedup window
// (24 h by sent_at) makes a new message, which the server stores and
// pushes: the client took it for a second record of the first, whatever
// their sent_at, hid it from the application and acked past it. A second
// record within the window is still hidden.
func TestACmidUsedAgainPastTheDedupWindowIsANewMessage(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	send := func(cmid, body string, sentAt int64) protocol.Message {
		p.pushMu.Lock()
		defer p.pushMu.Unlock()
		p.mu.Lock()
		p.appendLocked("g1", "bob", body, cmid)
		msgs := p.groups["g1"].msgs
		msgs[len(msgs)-1].SentAt = sentAt
		m := msgs[len(msgs)-1]
		p.mu.Unlock()
		p.push(m)
		return m
	}
	day := (24 * time.Hour).Milliseconds()
	t0 := time.Now().UnixMilli()
	send("alert-disk", "disk full on db1", t0)
	send("alert-disk", "disk full on db1", t0+day) // a second record, at the window's edge
	send("alert-disk", "disk full on db1, the next day", t0+day+1)
	send("alert-disk", "disk full on db1, the next day", t0+day+2) // a second record of that one
	got := rec.bodiesAfter(t, p, "g1", "later")
	if want := []string{"disk full on db1", "disk full on db1, the next day", "later"}; !slices.Equal(got, want) {
		t.Fatalf("handed %q, want %q", got, want)
	}
	if s := c.Stats(); s.Duplicates != 2 {
		t.Errorf("Stats().Duplicates = %d, want 2", s.Duplicates)
	}
}

// The client decides that two records are one send as the server does:
// sameSend is store.SameSend, which the persister and the fan-out use.
func TestTheClientTellsOneSendAsTheServerDoes(t *testing.T) {
	day := (24 * time.Hour).Milliseconds()
	values := []int64{0, 1, -1, day, day + 1, -day, -day - 1, 1763700000000, 1763700000000 + day, 1763700000000 + day + 1,
		1 << 53, 1<<53 + 1, 1<<53 - 1, -1 << 53, -1<<53 - 1, -1<<53 + 1, 1 << 62, -1 << 62, math.MaxInt64, math.MinInt64}
	for _, win := range []int64{1, 1000, day} {
		for _, a := range values {
			for _, b := range values {
				if got, want := sameSend(a, b, win), store.SameSend(a, b, win); got != want {
					t.Errorf("sameSend(%d, %d, %d) = %v, store.SameSend says %v", a, b, win, got, want)
				}
			}
		}
	}
}

// The sends the client remembers, to hand a send written twice once, are
// bounded for the client, not for each group: a group remembered the sends
// of its last 1,000 messages for as long as the client lived, 46 KiB (62
// with their sent_at), so a user in 1,000 busy groups held 45 MiB of them.
// The default DedupSends, 10,000, holds about 0.5 MiB.
func TestTheSendsRememberedAreBoundedHoweverManyTheGroups(t *testing.T) {
	const groups, sends = 1000, 1000
	c := &Client{groups: map[string]*group{}}
	c.cfg.setDefaults()
	for i := range groups {
		c.groupLocked(fmt.Sprint("g", i))
	}
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	before := heap()
	for j := range sends {
		for i := range groups {
			c.sentBeforeLocked(protocol.Message{Gid: fmt.Sprint("g", i), MsgID: int64(j), Sender: "bob", Cmid: fmt.Sprint("c-", j), SentAt: int64(j)})
		}
	}
	held := heap() - before
	runtime.KeepAlive(c)
	t.Logf("%d groups of %d sends each: %d bytes remembered (%.2f MiB, %d bytes a group)", groups, sends, held, float64(held)/(1<<20), held/groups)
	if most := int64(1 << 20); held > most {
		t.Fatalf("%d bytes remembered, want at most %d", held, most)
	}
}

// A resend the server wrote twice (its send records lost, as at every
// restart of chatd dev) stores only the first record; the second is pushed
// all the same, and after a fan-out restart with prev "unknown". The
// client held it behind a gap that no pull could close, and pulled the
// group again every few seconds until its next message. It is a second
// record of a send handed over already: neither handed over nor held.
func TestASecondRecordAfterAGapIsNotPulledFor(t *testing.T) {
	p := newPeer(t, map[string][]string{"g1": {"alice", "bob"}})
	c, rec := dial(t, p, "alice", nil)
	p.mu.Lock()
	first := p.appendLocked("g1", "bob", "one", "c1")
	p.mu.Unlock()
	p.push(first)
	waitFor(t, "one", func() bool { return rec.len() == 1 })
	second := first // its offset taken in the log, not stored: the server keeps the first record only
	p.mu.Lock()
	second.MsgID, second.Prev = p.offset, nil
	p.offset++
	p.mu.Unlock()
	pulls := c.Stats().Pulls
	p.pushRaw("alice", second)
	time.Sleep(500 * time.Millisecond) // MaxBackoff is 50 ms in these tests: ten pulls' time
	if got := c.Stats().Pulls - pulls; got > 1 {
		t.Fatalf("%d pulls of g1 in 0.5 s for a second record of a send handed over, which the server does not store", got)
	}
	if got := rec.bodies("g1"); !slices.Equal(got, []string{"one"}) {
		t.Fatalf("g1 delivered %q, want [one]", got)
	}
	p.post("g1", "bob", "two") // prev: the first record, as the store has it
	waitFor(t, "two", func() bool { return slices.Contains(rec.bodies("g1"), "two") })
}
