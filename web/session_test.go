package web

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/groupchat/chatd/internal/browsertest"
)

func signIn(t *testing.T, p *peer, b *browsertest.Tab) {
	b.Run(chromedp.Navigate(p.srv.URL+"/"),
		chromedp.SendKeys(chromedp.CSS(`#signin-form input[name=uid]`), "u"),
		chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)))
}

func synced(c *peerConn, f map[string]any, head, ack, read int64) {
	c.answer(f, map[string]any{"op": "synced", "groups": []any{
		map[string]any{"gid": "g", "head": head, "ack": ack, "read": read, "unread": head - read, "unread_exact": true}}})
}

// listed signs u in, answers the first sync with group g at head, ack and
// read, and waits until the page lists g.
func listed(t *testing.T, head, ack, read int64) (*peer, *browsertest.Tab, *peerConn) {
	t.Helper()
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	signIn(t, p, b)
	c := p.nextConn()
	synced(c, c.expect("sync", nil), head, ack, read)
	b.WaitUntil("g listed", `document.querySelector('#groups li[data-gid=g] button')`)
	return p, b, c
}

// openG opens group g (its cursor at 10) and returns the pull that loads
// it, unanswered.
func openG(b *browsertest.Tab, c *peerConn) map[string]any {
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	return c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
}

// next returns the next frame of op within d, or nil.
func (c *peerConn) next(op string, d time.Duration) map[string]any {
	deadline := time.After(d)
	for {
		select {
		case f := <-c.in:
			if f["op"] == op {
				return f
			}
		case <-deadline:
			return nil
		}
	}
}

// Opening a group with 20 unread (tall) messages: the page first scrolls to
// the bottom while loading, then to the first unread message. The read it
// sends must not pass what is on screen.
func TestOpeningReadsOnlyWhatIsOnScreenAfterLoading(t *testing.T) {
	p, b, c := listed(t, 30, 10, 10)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	c.answer(f, page(f, false, 30, tallMsgs(11, 30)...))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	time.Sleep(700 * time.Millisecond) // the older page takes a moment
	var old []map[string]any
	for id := int64(1); id <= 10; id++ {
		old = append(old, msg(id, -2, "v", fmt.Sprint("m", id)))
	}
	c.answer(f, page(f, false, 30, old...))
	b.WaitUntil("loaded", `document.querySelector('#messages .first-unread')`)
	time.Sleep(2 * time.Second) // past the read interval
	if read, onScreen := p.maxCursor("read"), newestOnScreen(b); read > onScreen {
		t.Fatalf("the page sent read upto %d; the newest message ever on screen after loading is %d", read, onScreen)
	}
}

// newestOnScreen returns the msgid of the newest message on screen, -1
// when none is.
func newestOnScreen(b *browsertest.Tab) int64 {
	return int64(browsertest.Eval[int](b, `(() => {
		const r = document.getElementById('scroller').getBoundingClientRect();
		let top = -1;
		for (const li of document.querySelectorAll('#messages .msg')) {
			const e = li.getBoundingClientRect();
			if (e.bottom > r.top && e.top < r.bottom) top = Math.max(top, Number(li.dataset.msgid));
		}
		return top;
	})()`))
}

// tallMsgs returns messages from..to of g, each taller than a line.
func tallMsgs(from, to int64) []map[string]any {
	long := strings.Repeat("a long line of text that wraps ", 40)
	var ms []map[string]any
	for id := from; id <= to; id++ {
		ms = append(ms, msg(id, -2, "v", fmt.Sprint("m", id, " ", long)))
	}
	return ms
}

// openAckedAhead opens g, listed with ack and head 100 and read 10 (another
// device acked far past the read cursor), and answers its first pulls: the
// forward one finds nothing, the first older one brings 51..100 and says
// there is more. It returns the next older pull, unanswered.
func openAckedAhead(t *testing.T, during func(c *peerConn)) (*peer, *browsertest.Tab, *peerConn, map[string]any) {
	p, b, c := listed(t, 100, 100, 10)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 100.0 })
	c.answer(f, page(f, false, 100))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 101.0 })
	if during != nil {
		during(c)
	}
	c.answer(f, page(f, true, 100, tallMsgs(51, 100)...))
	return p, b, c, c.expect("pull", func(f map[string]any) bool { return f["before"] == 51.0 })
}

// Another device acked far past the read cursor (ack 100, read 10): the
// page opened at the newest messages and read them, passing the 40 unread
// ones above that were never on screen. It pages up to the first unread
// message, no further, and opens there.
func TestOpeningAfterAnotherDeviceAckedAheadReadsOnlyWhatIsOnScreen(t *testing.T) {
	p, b, c, f := openAckedAhead(t, nil)
	c.answer(f, page(f, true, 100, tallMsgs(1, 50)...))
	b.WaitUntil("loaded", `document.querySelector('#messages .first-unread')`)
	time.Sleep(2 * time.Second) // past the read interval
	read, onScreen := p.maxCursor("read"), newestOnScreen(b)
	if read > onScreen || read < 11 || onScreen > 20 {
		t.Fatalf("the page sent read upto %d with message %d the newest on screen; want it opened at the first unread, 11, and read from there", read, onScreen)
	}
	if f := c.next("pull", 500*time.Millisecond); f != nil {
		t.Fatalf("the page pulled %v after its view reached the first unread message", f)
	}
}

// A message pushed while the opening's first older page is out joins on
// above it: the page is still taken, and the paging goes on to the first
// unread message.
func TestAPushWhileOpeningKeepsThePagingToTheFirstUnread(t *testing.T) {
	p, b, c, f := openAckedAhead(t, func(c *peerConn) {
		c.write(map[string]any{"op": "push", "msgs": []any{msg(120, 100, "v", "m120")}})
	})
	c.answer(f, page(f, false, 120, tallMsgs(1, 50)...))
	b.WaitUntil("loaded", `document.querySelector('#messages .first-unread')`)
	time.Sleep(2 * time.Second) // past the read interval
	if read, onScreen := p.maxCursor("read"), newestOnScreen(b); read > onScreen || onScreen > 20 {
		t.Fatalf("the page sent read upto %d with message %d the newest on screen; want it opened at the first unread, 11", read, onScreen)
	}
}

// An opening cut short before its view reaches the first unread message
// (here, an older page refused, and asked again unanswered) reads
// nothing: a read of what is on screen would pass the unread messages
// above it, never shown.
func TestAnOpeningCutShortReadsNothing(t *testing.T) {
	p, b, c, f := openAckedAhead(t, nil)
	c.answer(f, map[string]any{"op": "error", "code": "unavailable", "message": "history is unavailable right now; retry shortly"})
	b.WaitUntil("shown", `document.querySelectorAll('#messages .msg').length === 50`)
	pastTheReadInterval(t, b)
	if read := p.maxCursor("read"); read > 10 {
		t.Fatalf("the page sent read upto %d with messages 11..50 never loaded", read)
	}
}

// One heartbeat sync refused with a retryable error must not end the
// heartbeat for the rest of the session. HEARTBEAT (25 s) is shortened to
// 300 ms in the page by wrapping setTimeout before the page's scripts run.
func TestHeartbeatGoesOnAfterARefusedSync(t *testing.T) {
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	b.Run(func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{
			Source: `{ const st = window.setTimeout; window.setTimeout = (f, d, ...a) => st(f, d === 25000 ? 300 : d, ...a); }`})
		return chromedp.Void{}, err
	})
	signIn(t, p, b)
	c := p.nextConn()
	synced(c, c.expect("sync", nil), 10, 10, 10)
	f := c.next("sync", 3*time.Second) // the first heartbeat
	if f == nil {
		t.Fatal("no heartbeat sync")
	}
	c.answer(f, map[string]any{"op": "error", "code": "unavailable", "message": "redis: i/o timeout"})
	if f = c.next("sync", 5*time.Second); f == nil {
		t.Fatalf("after one refused heartbeat sync, no heartbeat for 5 s (interval 300 ms): lost tail pushes and a dead connection go unnoticed; page %s", b.State())
	}
}

// A message of mine that another device acked past (it is below my
// cursor) while this tab still held it in its outbox. The outbox must let
// it go, on screen and in sessionStorage, or it shows twice and is resent
// at every load: once the resend's answer names a msgid below the cursor,
// and once scrolling up shows the message, if that comes first (the
// resend still waiting for its answer).
func TestOutboxLetsGoOfAMessageBelowTheCursor(t *testing.T) {
	for _, answerFirst := range []bool{true, false} {
		name := map[bool]string{true: "the answer first", false: "the page first"}[answerFirst]
		t.Run(name, func(t *testing.T) {
			p := newPeer(t)
			b := browsertest.NewTab(t, browsertest.Start(t), "u")
			b.Run(chromedp.Navigate(p.srv.URL + "/"))
			browsertest.Eval[bool](b, `(sessionStorage.setItem('chatd.outbox.u', JSON.stringify([{gid: 'g', cmid: 'w-1', body: 'hi'}])), true)`)
			b.Run(chromedp.SendKeys(chromedp.CSS(`#signin-form input[name=uid]`), "u"),
				chromedp.Click(chromedp.CSS(`#signin-form button[type=submit]`)))
			c := p.nextConn()
			synced(c, c.expect("sync", nil), 10, 10, 10)
			send := c.expect("send", nil)
			if send["cmid"] != "w-1" {
				t.Fatalf("resend %v", send)
			}
			accept := func() {
				c.answer(send, map[string]any{"op": "accepted", "gid": "g", "cmid": "w-1", "msgid": 5})
				roundTrip(t, b) // the answer, and what the outbox does of it, handled
				outboxLetGo(t, b, "the resend accepted as message 5, below the cursor (10)")
			}
			if answerFirst {
				accept()
			}
			b.WaitUntil("g listed", `document.querySelector('#groups li[data-gid=g] button')`)
			f := openG(b, c)
			c.answer(f, page(f, false, 10))
			f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
			own := msg(5, -2, "u", "hi")
			own["cmid"] = "w-1"
			c.answer(f, page(f, false, 10, msg(3, -2, "v", "m3"), own, msg(8, -2, "v", "m8")))
			b.WaitUntil("history shown", `document.querySelectorAll('#messages .msg').length === 3`)
			roundTrip(t, b) // the older page, and what the outbox does of it, handled
			outboxLetGo(t, b, "message 5 (hi) in the history")
			if !answerFirst {
				accept()
			}
			if got := b.Bodies(); len(got) != 3 {
				t.Fatalf("the history shows %q; want m3, hi and m8 once each", got)
			}
		})
	}
}

// outboxLetGo fails the test unless the page's outbox is empty, on screen
// and in sessionStorage, after what happened.
func outboxLetGo(t *testing.T, b *browsertest.Tab, what string) {
	t.Helper()
	outbox := browsertest.Eval[int](b, `document.querySelectorAll('#outbox .msg').length`)
	stored := browsertest.Eval[string](b, `sessionStorage.getItem('chatd.outbox.u')`)
	if outbox != 0 || stored != "[]" {
		t.Fatalf("%s, yet the message is still in the outbox (%d shown, stored %s): shown twice, resent at each load", what, outbox, stored)
	}
}

// Pushes of a group the user never opens, after one lost push: none
// connects and none is pulled (only an open group pulls gaps), so none is
// held: each closed group held up to 1,000 of them, and a user in many
// busy groups a hundred MB. Opening the group pulls them.
func TestPushesOfAGroupNotOpenAfterAGapAreNotHeld(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	body := strings.Repeat("x", 4000)
	for batch := 0; batch < 20; batch++ {
		var msgs []any
		for i := 0; i < 250; i++ {
			id := int64(12 + batch*250 + i) // 11 was lost
			msgs = append(msgs, msg(id, id-1, "v", body))
		}
		c.write(map[string]any{"op": "push", "msgs": msgs})
	}
	b.WaitUntil("pushes in", `chat.stats.pushes === 5000`)
	if n := browsertest.Eval[int](b, `chat.group('g').buf.size`); n > 0 {
		t.Fatalf("the page holds %d pushes (%d MB of bodies) of a group it has not open, after a gap it does not pull", n, n*4000>>20)
	}
	listDrawn(b)
	if got := browsertest.Eval[string](b, `document.querySelector('#groups li[data-gid=g] .badge')?.textContent`); got != "5000" {
		t.Errorf("the badge says %q, want 5000: the pushes not held are counted", got)
	}
	// The lost push comes: it joins on; the rest is pulled when it opens.
	c.write(map[string]any{"op": "push", "msgs": []any{msg(11, 10, "v", body)}})
	b.WaitUntil("the lost push taken", `chat.group('g').contig === 11`)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	c.expect("pull", func(f map[string]any) bool { return f["after"] == 11.0 })
}

// A sync refused with a long message ends the session, whatever the
// message's length: a WebSocket close reason holds at most 123 bytes, and
// a longer one made close throw and left the old connection open beside
// the next.
func TestASyncRefusedWithALongMessageClosesTheSession(t *testing.T) {
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	signIn(t, p, b)
	c := p.nextConn()
	c.answer(c.expect("sync", nil), map[string]any{"op": "error", "code": "unavailable",
		"message": "the memberships of " + strings.Repeat("g", 128) + " are being rebuilt; retry in a few seconds"})
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("10 s after its sync was refused the page still holds the connection open (problems %v)", b.Problems())
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page logged errors: %v", p)
	}
}

// A resync frame (the server may have lost pushes to the page) syncs at
// once, not at the next heartbeat, and pulls what the open group is
// missing; a refused sync is asked again soon, not a heartbeat later.
func TestAResyncFrameSyncsAndPullsAtOnce(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 && f["before"] == nil })
	c.answer(f, page(f, false, 10))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 10, msg(10, noPrev, "v", "m10")))
	b.WaitUntil("the history shown", `document.querySelectorAll('#messages .msg').length === 1`)

	c.write(map[string]any{"op": "resync", "reason": "push_route"})
	if f = c.next("sync", 10*time.Second); f == nil { // the heartbeat comes after 25 s
		t.Fatalf("no sync within 10 s of a resync frame; page %s", b.State())
	}
	c.answer(f, map[string]any{"op": "error", "code": "unavailable", "message": "memberships are being rebuilt; retry shortly"})
	if f = c.next("sync", 12*time.Second); f == nil { // retried after 2 s, not at the heartbeat's 25
		t.Fatalf("the refused sync of a resync was not asked again within 12 s; page %s", b.State())
	}
	synced(c, f, 12, 10, 10)
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	c.answer(f, page(f, false, 12, msg(12, noPrev, "v", "m12, whose push was lost")))
	b.WaitUntil("the lost message shown", `document.querySelectorAll('#messages .msg').length === 2`)
	if n := p.maxCursor("ack"); n > 12 {
		t.Fatalf("ack %d past the newest message", n)
	}
}

// A resync frame that comes while the session's first sync is under way
// may be about what that sync was answered without: the page syncs again
// as soon as the first is answered, not at the next heartbeat.
func TestAResyncFrameDuringTheFirstSyncIsObeyed(t *testing.T) {
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	signIn(t, p, b)
	c := p.nextConn()
	f := c.expect("sync", nil)
	c.write(map[string]any{"op": "resync", "reason": "late_store"})
	time.Sleep(100 * time.Millisecond) // the frame reaches the page before the answer
	synced(c, f, 10, 10, 10)
	if f = c.next("sync", 10*time.Second); f == nil { // the heartbeat comes after 25 s
		t.Fatalf("no sync within 10 s of a resync frame that came during the first sync; page %s", b.State())
	}
	synced(c, f, 11, 10, 10)
	b.WaitUntil("the new head counted", `document.querySelector('#groups li[data-gid=g] .badge')?.textContent === '1'`)
}

// A resync frame that comes while a sync is under way, with that sync's
// answer right behind it, is not swallowed by the answer: the page syncs
// once more after it, not at the next heartbeat.
func TestAResyncFrameDuringASyncIsObeyedAfterIt(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	c.write(map[string]any{"op": "resync", "reason": "push_route"})
	f := c.expect("sync", nil)
	// Both frames wait while the page is busy, then come one after the
	// other. Chromium runs the timer the first one sets before handling
	// the second; a browser that handled the answer first used to lose the
	// resync until the next heartbeat.
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		browsertest.Eval[bool](b, `(() => { const t = Date.now(); while (Date.now() - t < 800) {} return true })()`)
	}()
	time.Sleep(300 * time.Millisecond)
	c.write(map[string]any{"op": "resync", "reason": "late_store"})
	synced(c, f, 10, 10, 10)
	<-busy
	if f = c.next("sync", 10*time.Second); f == nil { // the heartbeat comes after 25 s
		t.Fatalf("no sync within 10 s of a resync frame that came during a sync; page %s", b.State())
	}
	synced(c, f, 11, 10, 10)
	b.WaitUntil("the new head counted", `document.querySelector('#groups li[data-gid=g] .badge')?.textContent === '1'`)
}

// A connection that is let in but never authenticated (a gateway that
// hangs before its authed, a proxy that swallows frames) is dropped after
// its time to authenticate and dialled again with backoff: the page said
// "connecting…" for ever. The 10 s are shortened to 500 ms here.
func TestAConnectionNeverAuthedIsDialledAgain(t *testing.T) {
	p := newPeer(t)
	p.muteAuth()
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	shortenTimers(b, 10000, 500)
	signIn(t, p, b)
	time.Sleep(6 * time.Second)
	// Dropped at 0.5 s, then dialled after 0.25-0.5 s, 0.5-1 s, 1-2 s, 2-4 s.
	if n := p.upgrades(); n < 3 || n > 6 {
		t.Fatalf("the page opened %d connections in 6 s to a server that never answers its token; want it dropped after 0.5 s and dialled again with backoff; page %s", n, b.State())
	}
	if st := browsertest.Eval[string](b, `document.getElementById('status').textContent`); st == "online" {
		t.Fatalf("the page says %q", st)
	}
}

// shortenTimers makes the page's timers of from ms last to ms instead,
// wrapping setTimeout before the page's scripts run.
func shortenTimers(b *browsertest.Tab, from, to int) {
	b.Run(func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, cdppage.AddScriptToEvaluateOnNewDocument, cdppage.AddScriptToEvaluateOnNewDocumentParams{
			Source: fmt.Sprintf(`{ const st = window.setTimeout; window.setTimeout = (f, d, ...a) => st(f, d === %d ? %d : d, ...a); }`, from, to)})
		return chromedp.Void{}, err
	})
}
