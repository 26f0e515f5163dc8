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
