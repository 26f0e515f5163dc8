package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/groupchat/chatd/internal/browsertest"
)

// A read the page meant to send that another device's read overtook (the
// sync says read 20 while the page wanted 15) has nothing left to send. It
// must not stay due: flush sent nothing and kept it due, and scheduled
// itself again at once, spinning the tab's CPU until the user saw a newer
// message.
func TestAReadOvertakenByAnotherDeviceIsNoLongerDue(t *testing.T) {
	_, b, c := listed(t, 20, 20, 10)
	browsertest.Eval[bool](b, `(chat.seen('g', 15), chat.sync(), true)`)
	c.answer(c.expect("sync", nil), map[string]any{"op": "synced", "groups": []any{
		map[string]any{"gid": "g", "head": 20, "ack": 20, "read": 20, "unread": 0, "unread_exact": true}}})
	b.WaitUntil("the other device's read", `chat.group('g').read === 20`)
	browsertest.Eval[bool](b, `(window.flushes = 0, chat.cursors.flush = ((f) => (all) => { window.flushes++; return f(all); })(chat.cursors.flush.bind(chat.cursors)), true)`)
	time.Sleep(2500 * time.Millisecond)
	if n := browsertest.Eval[int](b, `window.flushes`); n > 3 {
		t.Fatalf("with nothing left to send the page flushed its cursors %d times in 2.5 s", n)
	}
}

// Reading a group, then going to another while the connection is down:
// the read of the first goes out when the connection is back, after the
// sync that counted the group's badge, and the badge must not go on
// counting what the user read.
func TestABadgeOfAGroupReadWhileOfflineIsClearedOnReconnect(t *testing.T) {
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	signIn(t, p, b)
	c := p.nextConn()
	two := func(gRead, gUnread int64) map[string]any {
		return map[string]any{"op": "synced", "groups": []any{
			map[string]any{"gid": "g", "head": 14, "ack": 14, "read": gRead, "unread": gUnread, "unread_exact": true},
			map[string]any{"gid": "h", "head": 5, "ack": 5, "read": 5, "unread": 0, "unread_exact": true}}}
	}
	c.answer(c.expect("sync", nil), two(10, 4))
	b.WaitUntil("g listed", `document.querySelector('#groups li[data-gid=g] button')`)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 14.0 })
	c.answer(f, page(f, false, 14))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 15.0 })
	var ms []map[string]any
	for id := int64(11); id <= 14; id++ {
		ms = append(ms, msg(id, -2, "v", fmt.Sprint("m", id)))
	}
	c.answer(f, page(f, false, 14, ms...))
	b.WaitUntil("g shown and seen", `chat.group('g').readWant === 14`)
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	<-c.done
	if r := p.maxCursor("read"); r > 10 {
		t.Fatalf("the read (%d) went out before the connection dropped: the test no longer reads while offline", r)
	}
	b.WaitUntil("the banner", `!document.getElementById('banner').hidden`)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=h] button`)))
	time.Sleep(500 * time.Millisecond) // offline a moment longer
	c = p.nextConn()
	c.answer(c.expect("sync", nil), two(10, 4)) // the read of 20 is not sent yet
	f = c.expect("pull", func(f map[string]any) bool { return f["gid"] == "h" && f["after"] == 5.0 })
	c.answer(f, map[string]any{"op": "page", "gid": "h", "msgs": []any{}, "more": false, "head": 5})
	b.WaitUntil("the read of g sent", `chat.group('g').read === 14`)
	if f := c.next("sync", 3*time.Second); f != nil {
		c.answer(f, two(14, 0))
	}
	roundTrip(t, b)
	listDrawn(b)
	if badge := browsertest.Eval[string](b, `document.querySelector('#groups li[data-gid=g] .badge')?.textContent || ''`); badge != "" {
		t.Fatalf("g was read up to its head (the page sent read 14), yet its badge says %s unread", badge)
	}
}

// withCursors is a peer whose authed frames say max_cursors n.
func withCursors(t *testing.T, n int) *peer {
	p := newPeer(t)
	p.maxCursors = n
	return p
}

// awaitBatches waits up to d until the peer has taken want acks and reads,
// and returns the cursors frames and the ack and read frames by then.
func awaitBatches(p *peer, want int, d time.Duration) (batches []cursorsBatch, single int) {
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		p.mu.Lock()
		batches, single = append([]cursorsBatch(nil), p.batches...), p.singles
		taken := len(p.cursors)
		p.mu.Unlock()
		if taken >= want || time.Now().After(deadline) {
			return batches, single
		}
	}
}

// A message in each of 300 groups: to a server that takes cursors frames
// (its authed frame says max_cursors), their acks go in a frame or two
// (those due within half an interval go with the first), not one frame a
// group, which at the page's 100 frames a second had the last
// group's ack wait 3 s, and a user with messages in more than 100 groups a
// second ack later and later.
func TestTheAcksOfManyGroupsGoInAFrameOrTwo(t *testing.T) {
	p, b, c := listedBy(t, withCursors(t, 500), "", hGroups(manyGroups, 1, 0))
	pushToEveryGroup(c)
	batches, single := awaitBatches(p, manyGroups, 10*time.Second)
	if len(batches) == 0 || len(batches) > 2 || single != 0 {
		t.Fatalf("the acks of %d groups went in %d cursors frames and %d ack frames; want one or two cursors frames", manyGroups, len(batches), single)
	}
	b.WaitUntil("every ack taken", fmt.Sprintf(`[...chat.groups.values()].filter((g) => g.ack === 1).length === %d`, manyGroups))
	if n := browsertest.Eval[int](b, `chat.stats.acks`); n != manyGroups {
		t.Errorf("stats: %d acks, want %d", n, manyGroups)
	}
}

// A cursors frame costs the gateway's frame rate one frame more per 100
// entries (as a sync per 100 groups): charged one frame, a page with
// thousands of groups to ack sent frames of hundreds of entries at its
// whole budget, past the gateway's rate. It keeps to the server's limit
// of entries a frame, and charges its budget as the gateway does.
func TestCursorsFramesArePacedByWhatTheyCost(t *testing.T) {
	const n = 3000
	p, _, c := listedBy(t, withCursors(t, 300), "", hGroups(n, 1, 0))
	pushToGroups(c, n)
	batches, single := awaitBatches(p, n, 15*time.Second)
	taken := 0
	for _, b := range batches {
		taken += b.entries
		if b.entries > 300 {
			t.Errorf("a cursors frame of %d entries; the server takes 300", b.entries)
		}
	}
	if taken != n || single != 0 {
		t.Fatalf("%d acks taken in %d cursors frames, %d in ack frames; want %d, all in cursors frames", taken, len(batches), single, n)
	}
	// 4 frames each (300 entries) at 100 frames a second, after a burst
	// of 20 frames.
	took := batches[len(batches)-1].at.Sub(batches[0].at)
	if want := time.Duration(float64(4*len(batches)-20) / 100 * 0.7 * float64(time.Second)); took < want {
		t.Fatalf("the page sent %d cursors frames of 300 entries in %v; want at least %v (4 frames each at 100 frames a second)", len(batches), took, want)
	}
}

// An ack of a cursors frame refused as beyond_head is handled as the
// refusal of its ack frame: the group is taken up again from the server's
// cursor, and the other acks of the frame are taken.
func TestAnAckRefusedInACursorsFrameTakesItsGroupUpAgain(t *testing.T) {
	p, b, c := listedBy(t, withCursors(t, 500), "", hGroups(3, 1, 0))
	p.headAt(1)               // refuses every ack past 1...
	m := msg(5, 1, "v", "m5") // ...as h1's 5, which its sync never named
	m["gid"] = "h1"
	pushToGroups(c, 3)
	c.write(map[string]any{"op": "push", "msgs": []any{m}})
	waitRefused(t, p, b, 1)
	b.WaitUntil("h0 and h2 acked", `chat.group('h0').ack === 1 && chat.group('h2').ack === 1`)
	b.WaitUntil("h1 taken up again", `chat.group('h1').contig <= 1`)
	if f := c.next("sync", 5*time.Second); f == nil {
		t.Fatal("no sync after the refusal: h1 was not taken up again")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.batches) == 0 {
		t.Fatal("no cursors frame sent")
	}
}
