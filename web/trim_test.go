package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/groupchat/chatd/internal/browsertest"
)

// keepOpen is KEEP_OPEN in static/chat.js: messages held of the open group.
const keepOpen = 1000

// msgRange returns messages from..to of g, sent by v, without prev (as a
// page has them).
func msgRange(from, to int64) []map[string]any {
	var ms []map[string]any
	for id := from; id <= to; id++ {
		ms = append(ms, msg(id, noPrev, "v", fmt.Sprint("m", id)))
	}
	return ms
}

// Opening a group with 3,000 unread messages: the page holds at most
// keepOpen of them, but the oldest unread, where the view opens; the read
// it sends does not pass what was on screen. Trimmed while the opening
// pulled, the view began at 2001 and read 2,000 messages never shown.
func TestOpeningPastTheBoundKeepsTheFirstUnread(t *testing.T) {
	p, b, c := listed(t, 3000, 0, 0)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	for after := int64(0); after < 3000; after += 100 {
		f := c.expect("pull", func(f map[string]any) bool { return f["after"] == float64(after) })
		c.answer(f, page(f, after+100 < 3000, 3000, msgRange(after+1, after+100)...))
	}
	// Paging up from 1 finds nothing older (not asked once trimmed).
	if f := c.next("pull", 2*time.Second); f != nil && f["before"] != nil {
		c.answer(f, page(f, false, 3000))
	}
	b.WaitUntil("loaded", `chat.group('g').contig === 3000 && !chat.group('g').pulling && !chat.group('g').loadingOlder`)
	pastTheReadInterval(t, b)
	got := browsertest.Eval[[]int](b, `((o) => [o.length, o[0], Number(document.querySelector('#messages .msg').dataset.msgid)])(chat.group('g').order)`)
	if got[0] > keepOpen {
		t.Errorf("opened with 3,000 unread the group holds %d messages, want at most %d", got[0], keepOpen)
	}
	read, onScreen := p.maxCursor("read"), newestOnScreen(b)
	if got[1] != 1 || got[2] != 1 || read > onScreen || read < 1 {
		t.Fatalf("opened with 3,000 unread the group holds from %d, shows from %d, and sent read upto %d (the newest on screen %d); "+
			"want it to hold and show the first unread, 1, and read no further than what was on screen", got[1], got[2], read, onScreen)
	}
}

// A busy open group holding keepOpen messages, the user scrolling up past
// them: each older page stays while pushes come, whether one lands while
// the page is asked for or after it is shown, and scrolling down brings
// the newest back. Trimmed at every push, the page just loaded went (the
// 51 oldest), or was thrown away while asked for, and the view jumped.
func TestScrollingUpPastTheBoundWhilePushesCome(t *testing.T) {
	_, b, c := listed(t, 2000, 2000, 2000)
	openAtTheNewest(b, c)

	oldest := func() int64 { return int64(browsertest.Eval[int](b, `chat.group('g').order[0]`)) }
	shown := func(id int64) bool {
		return browsertest.Eval[bool](b, fmt.Sprintf(`!!document.querySelector('#messages .msg[data-msgid="%d"]')`, id))
	}
	push := func(id int64) {
		c.write(map[string]any{"op": "push", "msgs": []any{msg(id, id-1, "v", fmt.Sprint("m", id))}})
		b.WaitUntil("the push taken", fmt.Sprintf(`chat.group('g').contig === %d`, id))
	}
	scrollUp := func() map[string]any {
		browsertest.Eval[bool](b, `(document.getElementById('scroller').scrollTop = 0, true)`)
		return c.expect("pull", func(f map[string]any) bool { return f["before"] != nil })
	}
	answerOlder := func(f map[string]any) int64 {
		before := int64(f["before"].(float64))
		c.answer(f, page(f, true, 2000, msgRange(before-50, before-1)...))
		b.WaitUntil("the older page answered", `!chat.group('g').loadingOlder`)
		return before - 50
	}

	// A page shown, then a push.
	want := answerOlder(scrollUp())
	push(2001)
	if got := oldest(); got != want || !shown(want) {
		t.Errorf("a push after the older page from %d was shown: the group holds from %d (shown: %v); want the page kept", want, got, shown(want))
	}
	// A push while the page is asked for.
	f := scrollUp()
	push(2002)
	want = answerOlder(f)
	if got := oldest(); got != want || !shown(want) {
		t.Errorf("a push while the older page from %d was asked for: the group holds from %d (shown: %v); want the page taken", want, got, shown(want))
	}
	if n := browsertest.Eval[int](b, `chat.group('g').order.length`); n > keepOpen {
		t.Errorf("scrolled up, the group holds %d messages, want at most %d", n, keepOpen)
	}
	if t.Failed() {
		return
	}

	// Scrolling down brings the newest back, page by page, and a push
	// then joins on.
	scrollDownTo(t, b, c, 2002)
	push(2003)
	b.WaitUntil("the push shown", `document.querySelector('#messages .msg[data-msgid="2003"]')`)
	if n := browsertest.Eval[int](b, `chat.group('g').order.length`); n > keepOpen {
		t.Errorf("back at the newest, the group holds %d messages, want at most %d", n, keepOpen)
	}
}

// scrollDownTo scrolls the view of g to the bottom, again and again,
// answering the pulls of newer pages (see Chat.loadNewer) with messages
// up to last, until last is shown.
func scrollDownTo(t *testing.T, b *browsertest.Tab, c *peerConn, last int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !browsertest.Eval[bool](b, fmt.Sprintf(`!!document.querySelector('#messages .msg[data-msgid="%d"]')`, last)) {
		if time.Now().After(deadline) {
			t.Fatalf("scrolling down did not bring %d back within 20 s; page %s", last, b.State())
		}
		browsertest.Eval[bool](b, `((s) => (s.scrollTop = s.scrollHeight, true))(document.getElementById('scroller'))`)
		if f := c.next("pull", 200*time.Millisecond); f != nil && f["after"] != nil {
			after := int64(f["after"].(float64))
			to := min(after+100, last)
			c.answer(f, page(f, to < last, last, msgRange(after+1, to)...))
		}
	}
}

// The user sends while the open group is short of its newest (scrolled
// up past the bound while 200 pushes came, so the newest are not held):
// the message is drawn, on screen, and leaves the outbox only then; what
// was skipped to show it is not read. The outbox let it go when it
// arrived, not drawn, and the view went to the bottom of the window held,
// which pulled one page of 100: it was nowhere on screen, and the user
// might send it again. So too for a send of the outbox the composer did
// not make (one kept from before a reload): the view comes to the newest
// when it arrives.
func TestSendingShortOfTheNewestShowsTheMessage(t *testing.T) {
	t.Run("composer", func(t *testing.T) { sendShortOfTheNewest(t, func(b *browsertest.Tab) { typeAndSend(b, "mine") }) })
	t.Run("outbox", func(t *testing.T) {
		sendShortOfTheNewest(t, func(b *browsertest.Tab) { browsertest.Eval[bool](b, `(chat.outbox.send('g', 'mine'), true)`) })
	})
}

func sendShortOfTheNewest(t *testing.T, send func(b *browsertest.Tab)) {
	p, b, c := listed(t, 2000, 2000, 2000)
	shortOfTheNewest(b, c)

	// The send, its push, and the pulls of a real server meanwhile.
	send(b)
	f := c.expect("send", nil)
	mine := msg(2201, 2200, "u", "mine")
	mine["cmid"] = f["cmid"]
	c.answer(f, map[string]any{"op": "accepted", "gid": "g", "cmid": f["cmid"], "msgid": 2201})
	c.write(map[string]any{"op": "push", "msgs": []any{mine}})
	shown := answerPullsUntil(b, c, 2201, func(id int64) map[string]any {
		if id == 2201 {
			return mine
		}
		return msg(id, noPrev, "v", fmt.Sprint("m", id))
	})
	if shown != "on screen" {
		t.Fatalf("sent while the newest 200 were not held, the message is %s (the group shows %s, the outbox %d); want it on screen",
			shown, shownRange(b), browsertest.Eval[int](b, `document.querySelectorAll('#outbox li').length`))
	}
	b.WaitUntil("the outbox empty", `document.querySelectorAll('#outbox li').length === 0`)
	// 2001 on were never on screen before the view came to the newest.
	pastTheReadInterval(t, b)
	if read := p.maxCursor("read"); read > 2000 {
		t.Errorf("brought to the newest, the page read up to %d; want no further than 2000, the newest on screen before", read)
	}
}

// The "new messages" button while the open group is short of its newest
// (scrolled up past the bound while 200 pushes came) brings the view to
// the newest, as a send does; what was skipped to show them is not read.
// It scrolled to the bottom of the window held, which pulled one page of
// 100 below it and stopped there: the newest were nowhere on screen.
func TestJumpingShortOfTheNewestShowsTheNewest(t *testing.T) {
	p, b, c := listed(t, 2000, 2000, 2000)
	shortOfTheNewest(b, c)
	b.WaitUntil("the jump button shown", `!document.getElementById('jump').hidden`)
	b.Run(chromedp.Click(chromedp.CSS(`#jump`)))
	shown := answerPullsUntil(b, c, 2200, func(id int64) map[string]any { return msg(id, noPrev, "v", fmt.Sprint("m", id)) })
	if shown != "on screen" {
		t.Fatalf("jumped while the newest 200 were not held, the newest, 2200, is %s (the group shows %s); want it on screen",
			shown, shownRange(b))
	}
	if browsertest.Eval[bool](b, `!document.getElementById('jump').hidden`) {
		t.Errorf("at the newest, the jump button is still shown")
	}
	pastTheReadInterval(t, b)
	if read := p.maxCursor("read"); read > 2000 {
		t.Errorf("brought to the newest, the page read up to %d; want no further than 2000, the newest on screen before", read)
	}
}

// shortOfTheNewest opens g (2,000 messages, all read) at the newest,
// scrolls up one older page past the bound, and pushes 2001 to 2200,
// whose newest the group then does not hold.
func shortOfTheNewest(b *browsertest.Tab, c *peerConn) {
	openAtTheNewest(b, c)
	browsertest.Eval[bool](b, `(document.getElementById('scroller').scrollTop = 0, true)`)
	f := c.expect("pull", func(f map[string]any) bool { return f["before"] == 1001.0 })
	c.answer(f, page(f, true, 2000, msgRange(951, 1000)...))
	b.WaitUntil("the older page shown", `document.querySelector('#messages .msg[data-msgid="951"]')`)
	var pushed []any
	for id := int64(2001); id <= 2200; id++ {
		pushed = append(pushed, msg(id, id-1, "v", fmt.Sprint("m", id)))
	}
	c.write(map[string]any{"op": "push", "msgs": pushed})
	b.WaitUntil("the pushes taken, the newest not held", `chat.group('g').contig === 2200 && chat.group('g').newerMore`)
}

// answerPullsUntil answers the pulls of g, whose messages run to last
// (each of(id)), as a real server does, until last is on screen or 10 s
// pass, and returns where last is: on screen, drawn off screen, or not
// drawn.
func answerPullsUntil(b *browsertest.Tab, c *peerConn, last int64, of func(id int64) map[string]any) string {
	return answerPullsUntilShown(b, c, last, last, of)
}

// answerPullsUntilShown answers the pulls of g, whose messages run to
// last, as answerPullsUntil, until message want is on screen.
func answerPullsUntilShown(b *browsertest.Tab, c *peerConn, last, want int64, of func(id int64) map[string]any) string {
	shown := fmt.Sprintf(`(() => {
		const li = document.querySelector('#messages .msg[data-msgid="%d"]');
		if (!li) return 'not drawn';
		const r = document.getElementById('scroller').getBoundingClientRect(), e = li.getBoundingClientRect();
		return e.bottom > r.top && e.top < r.bottom ? 'on screen' : 'drawn off screen';
	})()`, want)
	deadline := time.Now().Add(10 * time.Second)
	for browsertest.Eval[string](b, shown) != "on screen" && time.Now().Before(deadline) {
		if f := c.next("pull", 200*time.Millisecond); f != nil {
			answerPull(c, f, last, of)
		}
	}
	return browsertest.Eval[string](b, shown)
}

// answerPull answers pull f of g, whose messages run to last (each
// of(id)), as a real server does.
func answerPull(c *peerConn, f map[string]any, last int64, of func(id int64) map[string]any) {
	limit := int64(f["limit"].(float64))
	var ms []map[string]any
	var more bool
	if a, ok := f["after"].(float64); ok {
		for id := int64(a) + 1; id <= min(int64(a)+limit, last); id++ {
			ms = append(ms, of(id))
		}
		more = int64(a)+limit < last
	} else {
		before := int64(f["before"].(float64))
		for id := max(1, before-limit); id < before; id++ {
			ms = append(ms, of(id))
		}
		more = before-limit > 1
	}
	c.answer(f, page(f, more, last, ms...))
}

// shownRange says which messages the open group shows: "first to last".
func shownRange(b *browsertest.Tab) string {
	return browsertest.Eval[string](b, `((l) => l.length ? l[0].dataset.msgid + ' to ' + l[l.length - 1].dataset.msgid : 'none')(document.querySelectorAll('#messages .msg'))`)
}

// openAtTheNewest opens g, everything of its 2,000 read, and answers its
// pulls: the newest page, then keepOpen before it; it returns once the
// view is at the newest.
func openAtTheNewest(b *browsertest.Tab, c *peerConn) {
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 2000.0 })
	c.answer(f, page(f, false, 2000))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 2001.0 })
	c.answer(f, page(f, true, 2000, msgRange(2001-keepOpen, 2000)...))
	b.WaitUntil("opened at the newest", `chat.group('g').order.length === 1000 && document.getElementById('scroller').scrollTop > 0`)
	time.Sleep(300 * time.Millisecond) // the scroll to the newest settles
}
