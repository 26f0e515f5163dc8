package web

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/coder/websocket"

	"github.com/groupchat/chatd/internal/browsertest"
)

const noPrev = -2 // msg: a push without prev

// The page's half of the protocol against a scripted gateway: pushes that
// skip a message are held back until a pull fills the gap, duplicates are
// dropped, a push without prev makes the page pull, cursors never pass a
// missing message, and a send cut off by a dropped connection is sent
// again on the next one with the same cmid.
func TestPageGapsDuplicatesAndResends(t *testing.T) {
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	b.Run(chromedp.Navigate(p.srv.URL+"/"),
		chromedp.SendKeys(chromedp.CSS(`#signin-form input[name=uid]`), "u"),
		chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)))
	c := p.nextConn()
	f := c.expect("sync", nil)
	c.answer(f, map[string]any{"op": "synced", "groups": []any{
		map[string]any{"gid": "g", "head": 10, "ack": 10, "read": 10, "unread": 0, "unread_exact": true}}})
	b.WaitUntil("g listed", `document.querySelector('#groups li[data-gid=g] button')`)

	// Open: what follows the cursor (nothing), then the page before it.
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 && f["before"] == nil })
	c.answer(f, page(f, false, 10))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 10, msg(2, noPrev, "v", "m2"), msg(5, noPrev, "u", "m5"), msg(10, noPrev, "v", "m10")))
	b.WaitUntil("the history shown", `document.querySelectorAll('#messages .msg').length === 3`)

	// A push whose prev (15) the page lacks waits for a pull.
	c.write(map[string]any{"op": "push", "msgs": []any{msg(20, 15, "v", "m20")}})
	gap := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	// Every ack the page holds back goes out now, not at its interval,
	// and the round trip after it comes back only once the peer has them.
	flushCursors(t, b)
	if got := b.Bodies(); !slices.Equal(got, []string{"m2", "m5", "m10"}) {
		t.Fatalf("with 15 missing the page shows %q; 20 must wait", got)
	}
	if top := p.maxCursor("ack"); top > 10 {
		t.Fatalf("the page acked %d while it lacked 15", top)
	}
	c.answer(gap, page(gap, false, 20, msg(15, noPrev, "v", "m15"), msg(20, noPrev, "v", "m20")))
	b.WaitUntil("the gap filled", `document.querySelectorAll('#messages .msg').length === 5`)

	// Duplicates are dropped; a push that follows is shown at once; a push
	// without prev is pulled.
	c.write(map[string]any{"op": "push", "msgs": []any{msg(20, 15, "v", "m20"), msg(15, 10, "v", "m15"), msg(25, 20, "v", "m25")}})
	c.write(map[string]any{"op": "push", "msgs": []any{msg(30, noPrev, "v", "m30")}})
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 25.0 })
	c.answer(f, page(f, false, 30, msg(30, noPrev, "v", "m30")))
	want := []string{"m2", "m5", "m10", "m15", "m20", "m25", "m30"}
	b.WaitUntil("m30", `document.querySelectorAll('#messages .msg').length === 7`)
	if got := b.Bodies(); !slices.Equal(got, want) {
		t.Fatalf("the page shows %q, want %q", got, want)
	}
	if n := browsertest.Eval[int](b, `chat.stats.duplicates`); n < 2 {
		t.Errorf("the page counted %d duplicates, want at least the 2 pushed again", n)
	}
	b.WaitUntil("ack and read of 30", `chat.group('g').ack === 30 && chat.group('g').read === 30`)

	// A send whose answer never comes: the connection drops, the page shows
	// the banner, reconnects, resyncs by pull and sends again, same cmid.
	b.Run(chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "hi"+kb.Enter))
	send := c.expect("send", nil)
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	<-c.done
	b.WaitUntil("the banner", `!document.getElementById('banner').hidden`)
	c = p.nextConn()
	f = c.expect("sync", nil)
	c.answer(f, map[string]any{"op": "synced", "groups": []any{
		map[string]any{"gid": "g", "head": 30, "ack": 30, "read": 30, "unread": 0, "unread_exact": true}}})
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 30.0 })
	c.answer(f, page(f, false, 30))
	again := c.expect("send", nil)
	if again["cmid"] != send["cmid"] || again["body"] != "hi" {
		t.Fatalf("the resend is %v, want the first send's cmid %v", again, send["cmid"])
	}
	c.answer(again, map[string]any{"op": "accepted", "gid": "g", "cmid": again["cmid"], "msgid": 31})
	own := msg(31, 30, "u", "hi")
	own["cmid"] = again["cmid"]
	c.write(map[string]any{"op": "push", "msgs": []any{own}})
	b.WaitUntil("hi shown once, the outbox empty", `document.querySelectorAll('#outbox .msg').length === 0 && document.getElementById('banner').hidden`)
	if got := b.Bodies(); !slices.Equal(got, append(want, "hi")) {
		t.Fatalf("after the resend the page shows %q", got)
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page logged errors: %v", p)
	}
}

// Back online after a while away with the group open: the resync pulls
// what came meanwhile, more than a screenful. The view must not jump past
// the first of those messages, and the read sent must not pass a message
// that was never on screen.
func TestAResyncReadsOnlyWhatWasOnScreen(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	f := openG(b, c)
	c.answer(f, page(f, false, 10))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	var old []map[string]any
	for id := int64(1); id <= 10; id++ {
		old = append(old, msg(id, -2, "v", fmt.Sprint("m", id)))
	}
	c.answer(f, page(f, false, 10, old...))
	b.WaitUntil("history shown", `document.querySelectorAll('#messages .msg').length === 10`)
	// Every message that is at least half on screen at any time is noted.
	browsertest.Eval[bool](b, `(() => {
		window.everShown = new Set();
		const io = new IntersectionObserver((es) => { for (const e of es) if (e.intersectionRatio >= 0.5 || e.intersectionRect.height >= e.rootBounds.height / 2) everShown.add(Number(e.target.dataset.msgid)); },
			{ root: document.getElementById('scroller'), threshold: [0, 0.5, 1] });
		const list = document.getElementById('messages');
		for (const li of list.children) io.observe(li);
		new MutationObserver((ms) => { for (const m of ms) for (const n of m.addedNodes) io.observe(n); }).observe(list, { childList: true });
		return true;
	})()`)
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	<-c.done
	c = p.nextConn()
	synced(c, c.expect("sync", nil), 60, 10, 10)
	long := strings.Repeat("a long line of text that wraps ", 40)
	var away []map[string]any
	for id := int64(11); id <= 60; id++ {
		away = append(away, msg(id, -2, "v", fmt.Sprint("m", id, " ", long)))
	}
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	c.answer(f, page(f, false, 60, away...))
	b.WaitUntil("the resync shown", `document.querySelectorAll('#messages .msg').length === 60`)
	time.Sleep(2500 * time.Millisecond) // past the read interval: the screen is looked at meanwhile
	// Every read the page holds back goes out now, and the round trip
	// after it comes back only once the peer has them.
	flushCursors(t, b)
	read := p.maxCursor("read")
	never := browsertest.Eval[[]int](b, `[...document.querySelectorAll('#messages .msg')].map(li => Number(li.dataset.msgid)).filter(id => id > 10 && id <= `+fmt.Sprint(read)+` && !everShown.has(id))`)
	if len(never) > 0 {
		t.Fatalf("the page sent read upto %d; of the messages that came while it was away, %v were never on screen", read, never)
	}
}
