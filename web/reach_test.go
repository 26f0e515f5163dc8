package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/groupchat/chatd/internal/browsertest"
)

// recordOnScreen has the page note, from now on, every message on screen
// (as the page takes it: half of the message, or half the view) at every
// frame drawn.
func recordOnScreen(b *browsertest.Tab) {
	browsertest.Eval[bool](b, `(window.onScreen = new Set(), (function look() {
		const r = document.getElementById('scroller').getBoundingClientRect();
		for (const li of document.querySelectorAll('#messages .msg')) {
			const e = li.getBoundingClientRect();
			const h = Math.min(e.bottom, r.bottom) - Math.max(e.top, r.top);
			if (h > 0 && (h >= e.height / 2 || h >= r.height / 2)) window.onScreen.add(Number(li.dataset.msgid));
		}
		requestAnimationFrame(look);
	})(), true)`)
}

// readOnlyWhatWasOnScreen fails t unless the page read past read0 and
// every message from read0+1 to what it read was on screen since
// recordOnScreen.
func readOnlyWhatWasOnScreen(t *testing.T, p *peer, b *browsertest.Tab, read0 int64, what string) {
	t.Helper()
	pastTheReadInterval(t, b)
	read := p.maxCursor("read")
	if read <= read0 {
		t.Fatalf("%s, the page read nothing past %d (the group shows %s); want the reads to go on from %d", what, read0, shownRange(b), read0+1)
	}
	never := browsertest.Eval[int](b, fmt.Sprintf(`(() => {
		for (let id = %d; id <= %d; id++) if (!window.onScreen.has(id)) return id;
		return -1;
	})()`, read0+1, read))
	if never >= 0 {
		t.Fatalf("%s, the page read up to %d (the group shows %s, on screen up to %d), %d never on screen",
			what, read, shownRange(b), newestOnScreen(b), never)
	}
}

// The opening's older page refused for good: the view is left where the
// opening put it, 51 at the top, short of the first unread, 11. The user
// scrolls up: the page before, 1 to 50, lands above the view, which now
// reaches back to the read cursor, and the view goes to 11. Kept in
// place, it was read as it was: past 11 to 50, never on screen.
func TestScrollingUpToTheReadCursorReadsNothingSkipped(t *testing.T) {
	p, b, c, f := openAckedAhead(t, nil)
	c.answer(f, map[string]any{"op": "error", "code": "bad_request", "message": "test: refused"})
	b.WaitUntil("opened", `document.querySelectorAll('#messages .msg').length === 50 && !document.getElementById('mark-read').hidden`)
	recordOnScreen(b)
	browsertest.Eval[bool](b, `(document.getElementById('scroller').scrollTop = 0, true)`)
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 51.0 })
	c.answer(f, page(f, false, 100, tallMsgs(1, 50)...))
	b.WaitUntil("paged up", `document.querySelectorAll('#messages .msg').length === 100`)
	readOnlyWhatWasOnScreen(t, p, b, 10, "scrolled up to the read cursor, 10")
}

// The connection drops while the opening pages up to the first unread
// (ack 100, read 10; 51 to 100 shown). The next session's load pages up
// the rest, 1 to 50, above the view, and the view goes to 11. Kept in
// place, it was read as it was: past 11 to 50, never on screen.
func TestAReconnectWhilePagingUpToTheFirstUnreadReadsNothingSkipped(t *testing.T) {
	p, b, c, _ := openAckedAhead(t, nil)
	b.WaitUntil("shown", `document.querySelectorAll('#messages .msg').length === 50`)
	recordOnScreen(b)
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	c = p.nextConn()
	synced(c, c.expect("sync", nil), 100, 100, 10)
	for f := c.next("pull", 2*time.Second); f != nil; f = c.next("pull", 500*time.Millisecond) {
		if f["before"] != nil {
			c.answer(f, page(f, false, 100, tallMsgs(1, int64(f["before"].(float64))-1)...))
		} else {
			c.answer(f, page(f, false, 100))
		}
	}
	readOnlyWhatWasOnScreen(t, p, b, 10, "back from a drop while the opening paged up to 11")
}

// The view brought to the newest past unread messages (the jump button,
// the newest 200 not held; read 2000), the connection drops. The next
// session keeps the view where the user brought it and reads nothing
// above it; scrolled up to the read cursor, the view goes to 2001, and
// the reads go on from there, only of what was on screen. Kept at the
// newest by a load that paged up to the read cursor, it was read as it
// was: past 2001 on, never on screen.
func TestAReconnectAfterJumpingToTheNewestReadsNothingSkipped(t *testing.T) {
	p, b, c := listed(t, 2000, 2000, 2000)
	shortOfTheNewest(b, c)
	jumpToTheNewest(t, b, c, 2200)
	for f := c.next("pull", 500*time.Millisecond); f != nil; f = c.next("pull", 300*time.Millisecond) {
		answerPull(c, f, 2200, plain)
	}
	recordOnScreen(b)
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	c = p.nextConn()
	synced(c, c.expect("sync", nil), 2200, 2200, 2000)
	for f := c.next("pull", 2*time.Second); f != nil; f = c.next("pull", 500*time.Millisecond) {
		answerPull(c, f, 2200, plain)
	}
	pastTheReadInterval(t, b)
	if read, newest := p.maxCursor("read"), newestOnScreen(b); read > 2000 || newest != 2200 {
		t.Fatalf("brought to the newest past 2001 to 2200, unread, and back from a drop, the page read up to %d with %d the newest on screen (the group shows %s); "+
			"want the view kept at 2200 and nothing read past 2000", read, newest, shownRange(b))
	}
	for deadline := time.Now().Add(20 * time.Second); browsertest.Eval[int](b, `chat.group('g').order[0]`) > 2000; {
		if time.Now().After(deadline) {
			t.Fatalf("scrolling up did not reach the read cursor, 2000, within 20 s; the group shows %s", shownRange(b))
		}
		browsertest.Eval[bool](b, `(document.getElementById('scroller').scrollTop = 0, true)`)
		if f := c.next("pull", 300*time.Millisecond); f != nil {
			answerPull(c, f, 2200, plain)
		}
	}
	for f := c.next("pull", 500*time.Millisecond); f != nil; f = c.next("pull", 300*time.Millisecond) {
		answerPull(c, f, 2200, plain)
	}
	browsertest.Eval[bool](b, `(document.querySelector('#messages .msg[data-msgid="2001"]').scrollIntoView({ block: 'start' }), true)`)
	readOnlyWhatWasOnScreen(t, p, b, 2000, "brought to the newest past 2001 to 2200, back from a drop and scrolled up to the first unread")
}

// jumpToTheNewest clicks "new messages" once the page shows it, answers
// the pulls of g, whose messages run to last, and returns once last is on
// screen.
func jumpToTheNewest(t *testing.T, b *browsertest.Tab, c *peerConn, last int64) {
	t.Helper()
	b.WaitUntil("the jump button shown", `!document.getElementById('jump').hidden`)
	b.Run(chromedp.Click(chromedp.CSS(`#jump`)))
	if shown := answerPullsUntil(b, c, last, plain); shown != "on screen" {
		t.Fatalf("jumped to the newest, %d is %s (the group shows %s)", last, shown, shownRange(b))
	}
}
