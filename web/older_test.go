package web

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/groupchat/chatd/internal/browsertest"
)

// A page of older messages that comes back after the group was closed,
// and closing forgot the oldest messages it held (a closed group keeps its
// newest 200), no longer joins what is held: taking it left a hole, and
// scrolling up went on from below the page, so the forgotten messages
// were never shown again.
func TestAnOlderPageAnsweredAfterClosingLeavesNoHole(t *testing.T) {
	_, b, c := listed(t, 300, 300, 300)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 300.0 })
	c.answer(f, page(f, false, 300))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 301.0 })
	var held []map[string]any
	for id := int64(51); id <= 300; id++ {
		held = append(held, msg(id, -2, "v", "m"))
	}
	c.answer(f, page(f, true, 300, held...))
	b.WaitUntil("250 held", `chat.group('g').order.length === 250`)
	browsertest.Eval[bool](b, `(chat.loadOlder('g'), true)`)
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 51.0 })
	browsertest.Eval[bool](b, `(chat.closeGroup('g'), true)`)
	var older []map[string]any
	for id := int64(1); id <= 50; id++ {
		older = append(older, msg(id, -2, "v", "m"))
	}
	c.answer(f, page(f, false, 300, older...))
	b.WaitUntil("the older pull answered", `!chat.group('g').loadingOlder`)
	if got := browsertest.Eval[[]int](b, `((o) => [o.length, o[0], o[o.length - 1]])(chat.group('g').order)`); got[2]-got[1]+1 != got[0] {
		t.Fatalf("the group holds %d messages from %d to %d: a hole that scrolling up never fills", got[0], got[1], got[2])
	}
}

// The connection drops while a page of older messages loads, the view at
// the top of the group: once back, that page is asked for again. At the
// top no scroll event comes (there is nowhere further up to scroll), so
// the view said "Scroll up for older messages." and loaded nothing until
// the user scrolled down and up again.
func TestAnOlderPageLostToADisconnectIsAskedAgain(t *testing.T) {
	p, b, c := listed(t, 140, 140, 140)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 140.0 })
	c.answer(f, page(f, false, 140))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 141.0 })
	var held []map[string]any
	for id := int64(91); id <= 140; id++ {
		held = append(held, msg(id, -2, "v", "m"))
	}
	c.answer(f, page(f, true, 140, held...))
	b.WaitUntil("opened", `document.querySelectorAll('#messages .msg').length === 50 && !chat.group('g').loadingOlder`)
	browsertest.Eval[bool](b, `(document.getElementById('scroller').scrollTop = 0, true)`)
	c.expect("pull", func(f map[string]any) bool { return f["before"] == 91.0 })
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	c = p.nextConn()
	synced(c, c.expect("sync", nil), 140, 140, 140)
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 140.0 })
	c.answer(f, page(f, false, 140))
	f = nil // asked before or after the forward pull
	for _, s := range c.stashed {
		if s["op"] == "pull" && s["before"] == 91.0 {
			f = s
		}
	}
	if f == nil {
		f = c.next("pull", 5*time.Second)
	}
	if f == nil || f["before"] != 91.0 {
		t.Fatalf("back online with the view at the top, the page pulled %v, want the older page before 91 again; page %s", f, b.State())
	}
}

// A resend written twice (50 and 51, one cmid): the history keeps 50, and
// 51 was pushed. Scrolling up to 50 must not show the message twice.
func TestASendWrittenTwiceIsShownOnceWhenPagedUp(t *testing.T) {
	_, b, c := listed(t, 50, 50, 50)
	dup := msg(51, 50, "v", "once")
	dup["cmid"] = "dup"
	c.write(map[string]any{"op": "push", "msgs": []any{dup}})
	b.WaitUntil("51 taken", `chat.group('g').contig === 51`)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 51.0 })
	c.answer(f, page(f, false, 51))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 51.0 })
	first := msg(50, -2, "v", "once")
	first["cmid"] = "dup"
	c.answer(f, page(f, false, 51, msg(49, -2, "v", "m49"), first))
	b.WaitUntil("the older page shown", `document.querySelector('#messages .msg[data-msgid="49"]')`)
	if got := b.Bodies(); slices.Equal(got, []string{"m49", "once", "once"}) {
		t.Fatalf("the page shows %q: one send, twice", got)
	}
}

// A group left open while messages keep coming, the view at the newest:
// the page keeps its newest 1,000 and lets the older go (a tab open all
// day held everything it was handed), and scrolling up pulls them again.
// (Pushes come faster here than the view reads them: the newest are let
// go instead, and pulled again as the view follows them down.)
func TestAGroupLeftOpenKeepsItsNewestThousand(t *testing.T) {
	_, b, c := openAndPush1200(t, nil)
	scrollDownTo(t, b, c, 1210)
	got := browsertest.Eval[[]int](b, `[chat.group('g').order.length, chat.group('g').order[0], document.querySelectorAll('#messages .msg').length]`)
	if got[0] > 1000 || got[2] > 1000 || got[1] <= 10 {
		t.Fatalf("after 1,200 pushes into the open group it holds %d messages from %d, and shows %d; want at most the newest 1,000", got[0], got[1], got[2])
	}
	browsertest.Eval[bool](b, `(document.getElementById('scroller').scrollTop = 0, true)`)
	f := c.expect("pull", func(f map[string]any) bool { return f["before"] == float64(got[1]) })
	var older []map[string]any
	for id := int64(got[1]) - 50; id < int64(got[1]); id++ {
		older = append(older, msg(id, -2, "v", "m"))
	}
	c.answer(f, page(f, true, 1210, older...))
	b.WaitUntil("the older page shown", fmt.Sprintf(`chat.group('g').order[0] === %d`, got[1]-50))
}

// openAndPush1200 opens g (cursors at 10, messages 1..10), runs before (if
// any), and pushes 1,200 more, 11..1210, waiting until the page has them.
func openAndPush1200(t *testing.T, before func(b *browsertest.Tab)) (*peer, *browsertest.Tab, *peerConn) {
	p, b, c := listed(t, 10, 10, 10)
	f := openG(b, c)
	c.answer(f, page(f, false, 10))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	var first []map[string]any
	for id := int64(1); id <= 10; id++ {
		first = append(first, msg(id, -2, "v", "m"))
	}
	c.answer(f, page(f, false, 10, first...))
	b.WaitUntil("opened", `chat.group('g').order.length === 10 && !document.getElementById('scroller').hidden`)
	if before != nil {
		before(b)
	}
	for from := int64(11); from <= 1210; from += 100 {
		var ms []any
		for id := from; id < from+100; id++ {
			ms = append(ms, msg(id, id-1, "v", "m"))
		}
		c.write(map[string]any{"op": "push", "msgs": ms})
	}
	b.WaitUntil("every push taken", `chat.group('g').contig === 1210`)
	return p, b, c
}

// A busy group left open in a tab in the background: its messages go by
// unseen. The page holds 1,000 of them, from the oldest unread: the newest
// are let go, and pulled again when the view comes down to them. Back in
// front, the page reads what is on screen, and no further: it held every
// read for the rest of the session, its view no longer reaching back to
// the read cursor; then it let the oldest go while unread and read past
// them unseen.
func TestAGroupTrimmedInTheBackgroundIsReadWhenBackInFront(t *testing.T) {
	p, b, c := openAndPush1200(t, func(b *browsertest.Tab) {
		browsertest.Eval[bool](b, `(Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true }), true)`)
	})
	browsertest.Eval[bool](b, `(Object.defineProperty(document, 'visibilityState', { value: 'visible', configurable: true }),
		document.dispatchEvent(new Event('visibilitychange')), true)`)
	pastTheReadInterval(t, b)
	oldest := browsertest.Eval[int](b, `chat.group('g').order[0]`)
	if read, onScreen := p.maxCursor("read"), newestOnScreen(b); oldest > 11 || read <= 10 || read > onScreen {
		t.Fatalf("back in front, the group holds from %d and the page sent read upto %d, the newest on screen %d; want it to hold 11, the oldest unread, and read what is on screen", oldest, read, onScreen)
	}
	scrollDownTo(t, b, c, 1210)
	time.Sleep(2500 * time.Millisecond)
	flushCursors(t, b)
	if read := p.maxCursor("read"); read < 1200 {
		t.Fatalf("scrolled down to the newest messages, the page sent read upto %d; want the newest on screen (about 1210)", read)
	}
}

// A batch larger than a screen (the page that fills a gap) leaves the view
// on its first message, not at the newest. The group must stay bounded
// all the same: the page trimmed only while its view was at the newest,
// and from then on held every message it was handed.
func TestAGroupScrolledUpByABatchKeepsItsNewestThousand(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	opened(c, b, "v")
	// 11's push was lost: 12's shows the gap, filled by one page of tall
	// messages, more than a screen.
	c.write(map[string]any{"op": "push", "msgs": []any{msg(12, 11, "v", "m12")}})
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	c.answer(f, page(f, false, 110, tallMsgs(11, 110)...))
	b.WaitUntil("the batch shown", `chat.group('g').contig === 110`)
	for from := int64(111); from <= 1310; from += 100 {
		var ms []any
		for id := from; id < from+100; id++ {
			ms = append(ms, msg(id, id-1, "v", "m"))
		}
		c.write(map[string]any{"op": "push", "msgs": ms})
	}
	// The view is near the top: trimming there has it ask for older
	// pages, which this server answers.
	deadline := time.Now().Add(20 * time.Second)
	for browsertest.Eval[bool](b, `chat.group('g').contig !== 1310 || !!chat.group('g').loadingOlder`) {
		if time.Now().After(deadline) {
			t.Fatalf("the pushes were not all taken within 20 s; page %s", b.State())
		}
		if f := c.next("pull", 100*time.Millisecond); f != nil && f["before"] != nil {
			var older []map[string]any
			for id := max(1, int64(f["before"].(float64))-50); id < int64(f["before"].(float64)); id++ {
				older = append(older, msg(id, -2, "v", "m"))
			}
			c.answer(f, page(f, len(older) > 0 && older[0]["msgid"].(int64) > 1, 1310, older...))
		}
	}
	got := browsertest.Eval[[]int](b, `[chat.group('g').order.length, document.querySelectorAll('#messages .msg').length]`)
	if got[0] > 1050 || got[1] > 1050 {
		t.Fatalf("after a batch taller than the screen and 1,200 pushes the open group holds %d messages and shows %d; want at most the newest 1,000 and an older page", got[0], got[1])
	}
}

// A pull refused as overloaded or rate_limited while the group opens, or
// an older page refused so, is asked again after a back-off
// (PROTOCOL.md): it was given up on, and the group stayed empty, or the
// view without its older messages, until the user opened it again.
func TestPullsRefusedWhileOpeningAreAskedAgain(t *testing.T) {
	_, b, c := listed(t, 12, 10, 10)
	again := func(what string, match func(f map[string]any) bool, code string) map[string]any {
		t.Helper()
		f := c.expect("pull", match)
		c.answer(f, map[string]any{"op": "error", "code": code, "message": "refused for now; retry after a back-off"})
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			if f := c.next("pull", time.Until(deadline)); f != nil && match(f) {
				return f
			}
		}
		t.Fatalf("%s, refused as %s, was not asked again within 10 s; page %s", what, code, b.State())
		return nil
	}
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := again("the opening's pull", func(f map[string]any) bool { return f["after"] == 10.0 }, "overloaded")
	c.answer(f, page(f, false, 12, msg(11, -2, "v", "m11"), msg(12, -2, "v", "m12")))
	f = again("the opening's older page", func(f map[string]any) bool { return f["before"] == 11.0 }, "rate_limited")
	c.answer(f, page(f, false, 12, msg(10, -2, "v", "m10")))
	b.WaitUntil("the group shown", `document.querySelectorAll('#messages .msg').length === 3`)
}
