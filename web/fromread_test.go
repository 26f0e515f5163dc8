package web

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/groupchat/chatd/internal/browsertest"
)

// plain is message id of g, sent by v, as a page has it (no prev).
func plain(id int64) map[string]any { return msg(id, noPrev, "v", fmt.Sprint("m", id)) }

// openingFromRead opens g, listed with 3,000 messages all acked and 10
// read (its first unread more than 20 older pages up from the newest),
// answers the pulls of the opening as a real server does, and returns
// the pull of the page after the read cursor (Chat.fromRead), unanswered.
func openingFromRead(t *testing.T) (*peer, *browsertest.Tab, *peerConn, map[string]any) {
	t.Helper()
	p, b, c := listed(t, 3000, 3000, 10)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	for {
		f := c.expect("pull", nil)
		if f["after"] == 10.0 {
			return p, b, c, f
		}
		answerPull(c, f, 3000, plain)
	}
}

// The user sends while the page after the read cursor is asked for: its
// push brings the view to the newest (Chat.toNewest), and what lies
// between, never on screen, is not read. The view made at the newest
// joined after the read cursor still (joinsAfter), and read what it
// showed, past 11 to 2950.
func TestSendingWhileOpeningAtTheFirstUnreadReadsNothingSkipped(t *testing.T) {
	p, b, c, f := openingFromRead(t)
	typeAndSend(b, "mine")
	s := c.expect("send", nil)
	mine := msg(3001, 3000, "u", "mine")
	mine["cmid"] = s["cmid"]
	c.answer(s, map[string]any{"op": "accepted", "gid": "g", "cmid": s["cmid"], "msgid": 3001})
	c.write(map[string]any{"op": "push", "msgs": []any{mine}})
	of := func(id int64) map[string]any {
		if id == 3001 {
			return mine
		}
		return plain(id)
	}
	for ; f != nil; f = c.next("pull", 500*time.Millisecond) {
		answerPull(c, f, 3001, of)
	}
	pastTheReadInterval(t, b)
	drawn := browsertest.Eval[bool](b, `!!document.querySelector('#messages .msg[data-msgid="3001"]')`)
	if read := p.maxCursor("read"); !drawn || read > 10 {
		t.Fatalf("sent while the page after the read cursor, 10, was asked for, the message is drawn: %v (the group shows %s), "+
			"and the page read up to %d; want it drawn and no read past 10, 11 to 2950 never on screen", drawn, shownRange(b), read)
	}
}

// The connection drops while the page after the read cursor is asked
// for: the view then holds nothing. Once back, the view opens there
// still, and the read passes nothing that was not on screen. The next
// session paged up from the newest instead, still joining onto the read
// cursor: it read the newest 50, past 11 to 2950.
func TestAReconnectWhileOpeningAtTheFirstUnreadOpensThere(t *testing.T) {
	p, b, c, _ := openingFromRead(t)
	recordOnScreen(b)
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	c = p.nextConn()
	synced(c, c.expect("sync", nil), 3000, 3000, 10)
	shown := answerPullsUntilShown(b, c, 3000, 11, plain)
	for f := c.next("pull", 500*time.Millisecond); f != nil; f = c.next("pull", 500*time.Millisecond) {
		answerPull(c, f, 3000, plain)
	}
	if shown != "on screen" {
		t.Fatalf("back after a drop while the page after the read cursor, 10, was asked for, 11 is %s (the group shows %s); want the view at 11",
			shown, shownRange(b))
	}
	readOnlyWhatWasOnScreen(t, p, b, 10, "back after a drop while the page after the read cursor was asked for")
}

// A push the server then refuses as beyond_head comes while the page
// after the read cursor is asked for: the group is taken up again from
// the ack (Chat.retake). The view still opens at the first unread, and
// no read passes what was on screen. Joined on the ack instead, the
// view held the next message pushed and read it, past 11 to 3000.
func TestARetakeWhileOpeningAtTheFirstUnreadOpensThere(t *testing.T) {
	p, b, c, f := openingFromRead(t)
	recordOnScreen(b)
	p.headAt(3000)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(3001, 3000, "v", "not stored")}})
	synced(c, c.expect("sync", nil), 3000, 3000, 10)
	fw := c.expect("pull", func(f map[string]any) bool { return f["after"] == 3000.0 })
	c.answer(fw, page(fw, false, 3000))
	answerPull(c, f, 3000, plain)
	b.WaitUntil("taken up again", `!chat.group('g').retaking && !chat.group('g').pulling`)
	p.headAt(3001)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(3001, 3000, "v", "m3001")}})
	for f := c.next("pull", 2*time.Second); f != nil; f = c.next("pull", 500*time.Millisecond) {
		answerPull(c, f, 3001, plain)
	}
	if shown := browsertest.Eval[bool](b, `!!document.querySelector('#messages .msg[data-msgid="11"]')`); !shown {
		t.Fatalf("taken up again while the page after the read cursor, 10, was asked for, the group shows %s; want the view at 11", shownRange(b))
	}
	readOnlyWhatWasOnScreen(t, p, b, 10, "taken up again while the page after the read cursor was asked for")
}

// The view opened at the first unread, the user jumps to the newest
// ("new messages") and scrolls up 20 pages from there, short of the read
// cursor: nothing is read, what lies between never on screen. Past 20
// older pages the view was read as it was (a rule of the openings that
// stopped there), past some 1,900 unread messages never on screen.
func TestJumpingFromTheFirstUnreadAndScrollingUpReadsNothingSkipped(t *testing.T) {
	p, b, c, f := openingFromRead(t)
	answerPull(c, f, 3000, plain)
	b.WaitUntil("opened", `document.querySelector('#messages .first-unread') && !chat.group('g').pulling`)
	for f := c.next("pull", 500*time.Millisecond); f != nil; f = c.next("pull", 300*time.Millisecond) {
		answerPull(c, f, 3000, plain)
	}
	pastTheReadInterval(t, b)
	before := p.maxCursor("read")
	c.write(map[string]any{"op": "push", "msgs": []any{msg(3001, 3000, "v", "m3001")}})
	jumpToTheNewest(t, b, c, 3001)
	for deadline := time.Now().Add(30 * time.Second); browsertest.Eval[int](b, `chat.group('g').order[0]`) > 1951; {
		if time.Now().After(deadline) {
			t.Fatalf("scrolling up did not reach 1951 within 30 s; the group shows %s", shownRange(b))
		}
		browsertest.Eval[bool](b, `(document.getElementById('scroller').scrollTop = 0, true)`)
		if f := c.next("pull", 300*time.Millisecond); f != nil {
			answerPull(c, f, 3001, plain)
		}
	}
	pastTheReadInterval(t, b)
	if read := p.maxCursor("read"); read > before {
		t.Fatalf("read up to %d at the first unread, then jumped to the newest and scrolled up to %s, the page read up to %d; "+
			"want no read past %d, what follows it up to what was scrolled to never on screen", before, shownRange(b), read, before)
	}
}

// The view opened at the first unread and brought to the newest leaves
// unread messages above it that reads never pass: the user can mark them
// read, which reads the group up to what it received, and the reads of
// what is on screen go on. With no such word a busy group stayed unread
// until its user scrolled back through everything skipped.
func TestMarkingAllReadReadsWhatTheViewSkipped(t *testing.T) {
	p, b, c, f := openingFromRead(t)
	answerPull(c, f, 3000, plain)
	b.WaitUntil("opened", `document.querySelector('#messages .first-unread') && !chat.group('g').pulling`)
	if browsertest.Eval[bool](b, `!document.getElementById('mark-read').hidden`) {
		t.Fatalf("opened at the first unread, the page offers to mark all read; want it only when the view skipped unread messages")
	}
	c.write(map[string]any{"op": "push", "msgs": []any{msg(3001, 3000, "v", "m3001")}})
	jumpToTheNewest(t, b, c, 3001)
	b.WaitUntil("mark all read offered", `!document.getElementById('mark-read').hidden`)
	b.Run(chromedp.Click(chromedp.CSS(`#mark-read`)))
	pastTheReadInterval(t, b)
	if read := p.maxCursor("read"); read != 3001 {
		t.Fatalf("marked all read at the newest, the page read up to %d; want 3001, all it received", read)
	}
	if browsertest.Eval[bool](b, `!document.getElementById('mark-read').hidden`) {
		t.Errorf("marked all read, the page still offers it")
	}
}

// The sync counted more unread messages than the opening's 20 older
// pages hold: the view opens at the first unread at once. It paged up 20
// pages from the newest first, and threw them away, at every opening.
// The real server counts as the second case does: its window holds the
// newest 1,000 (its default), trimmed above the read cursor, so the sync
// says 1000, not exact (a lower bound: at least one more below it).
// Taken as 1,000, that count never passed 20 pages.
func TestOpeningFarBelowTheFirstUnreadPagesNothingUpFirst(t *testing.T) {
	for _, unread := range []struct {
		n     int
		exact bool
	}{{2990, true}, {1000, false}} {
		p := newPeer(t)
		b := browsertest.NewTab(t, browsertest.Start(t), "u")
		signIn(t, p, b)
		c := p.nextConn()
		f := c.expect("sync", nil)
		c.answer(f, map[string]any{"op": "synced", "groups": []any{
			map[string]any{"gid": "g", "head": 3000, "ack": 3000, "read": 10, "unread": unread.n, "unread_exact": unread.exact}}})
		b.WaitUntil("g listed", `document.querySelector('#groups li[data-gid=g] button')`)
		b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
		f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 3000.0 })
		answerPull(c, f, 3000, plain)
		f = c.expect("pull", nil)
		if f["after"] != 10.0 {
			t.Fatalf("with %d unread (exact %v), the opening asked %v after its forward pull; want the page after the read cursor, 10", unread.n, unread.exact, f)
		}
		answerPull(c, f, 3000, plain)
		b.WaitUntil("opened at the first unread", `document.querySelector('#messages .first-unread')?.dataset.msgid === '11'`)
	}
}

// Opened at the first unread, 2,890 messages below the view not held:
// the page offers to bring the view to the newest ("new messages"), as it
// does when a push comes below a view short of the newest. Without a
// push it did not, and a quiet group was brought to its newest (and to
// "Mark all read") only by scrolling down through 30 pages.
func TestOpeningAtTheFirstUnreadOffersTheNewest(t *testing.T) {
	_, b, c, f := openingFromRead(t)
	answerPull(c, f, 3000, plain)
	b.WaitUntil("opened", `document.querySelector('#messages .first-unread') && !chat.group('g').pulling`)
	roundTrip(t, b)
	if browsertest.Eval[bool](b, `document.getElementById('jump').hidden`) {
		t.Fatalf("opened at the first unread, 11, the newest 3000 not held (the group shows %s), the page offers no way to them", shownRange(b))
	}
	b.Run(chromedp.Click(chromedp.CSS(`#jump`)))
	if shown := answerPullsUntil(b, c, 3000, plain); shown != "on screen" {
		t.Fatalf("jumped to the newest, 3000 is %s (the group shows %s)", shown, shownRange(b))
	}
}

// The view opened at the first unread, the user jumps to the newest and
// the connection drops: back, the view stays at the newest, where the
// user brought it. The next session paged up 20 pages from there, then
// opened at the first unread again ("the group shows 19 to 118").
func TestAReconnectKeepsAViewBroughtToTheNewest(t *testing.T) {
	p, b, c, f := openingFromRead(t)
	answerPull(c, f, 3000, plain)
	b.WaitUntil("opened", `document.querySelector('#messages .first-unread') && !chat.group('g').pulling`)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(3001, 3000, "v", "m3001")}})
	jumpToTheNewest(t, b, c, 3001)
	c.ws.Close(websocket.StatusGoingAway, "test: going away")
	c = p.nextConn()
	synced(c, c.expect("sync", nil), 3001, 3001, 10)
	for f := c.next("pull", time.Second); f != nil; f = c.next("pull", 500*time.Millisecond) {
		answerPull(c, f, 3001, plain)
	}
	b.WaitUntil("back", `chat.online && !chat.group('g').pulling`)
	if newest := newestOnScreen(b); newest != 3001 {
		t.Fatalf("jumped to the newest, then back after a drop, the newest on screen is %d (the group shows %s); want the view where the user brought it, at 3001",
			newest, shownRange(b))
	}
}

// Another device acked 3,000 messages of which the user read 10: the
// first unread is more than the opening's 20 older pages up from the
// newest. The view opens at it, and the read starts there. Opened at the
// newest 1,000 instead, the page read from 2001, past 1,990 unread
// messages never on screen.
func TestOpeningFarBelowTheFirstUnreadOpensThere(t *testing.T) {
	p, b, c := listed(t, 3000, 3000, 10)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	shown := answerPullsUntilShown(b, c, 3000, 11, func(id int64) map[string]any { return msg(id, noPrev, "v", fmt.Sprint("m", id)) })
	if shown != "on screen" {
		t.Fatalf("opened with its first unread, 11, 2,990 messages up from the newest, 11 is %s (the group shows %s); want the view opened there",
			shown, shownRange(b))
	}
	// The view at the top of what it holds pages up too (1 to 10, read).
	for f := c.next("pull", 500*time.Millisecond); f != nil; f = c.next("pull", 500*time.Millisecond) {
		answerPull(c, f, 3000, func(id int64) map[string]any { return msg(id, noPrev, "v", fmt.Sprint("m", id)) })
	}
	b.WaitUntil("opened", `!chat.group('g').pulling && !chat.group('g').loadingOlder`)
	pastTheReadInterval(t, b)
	if read, onScreen := p.maxCursor("read"), newestOnScreen(b); read > onScreen || read < 11 {
		t.Fatalf("opened at the first unread, the page sent read upto %d with %d the newest on screen; want it read from 11 up to what was on screen", read, onScreen)
	}
	// Scrolling down brings the newer pages, and reads follow.
	for deadline := time.Now().Add(15 * time.Second); newestOnScreen(b) < 300 && time.Now().Before(deadline); {
		browsertest.Eval[bool](b, `(document.getElementById('scroller').scrollTop = 1e9, true)`)
		if f := c.next("pull", 200*time.Millisecond); f != nil {
			answerPull(c, f, 3000, func(id int64) map[string]any { return msg(id, noPrev, "v", fmt.Sprint("m", id)) })
		}
	}
	pastTheReadInterval(t, b)
	if read, onScreen := p.maxCursor("read"), newestOnScreen(b); read < 300 || read > onScreen {
		t.Fatalf("scrolled down to %d, the page read up to %d; want the reads to follow the view", onScreen, read)
	}
}

// The page after the read cursor refused as unavailable again and again
// (ClickHouse down, or lacking what Redis let go): the view goes to the
// newest, which the server holds in Redis, reads nothing above it, and
// says why. It stayed empty while the page was asked again and again.
func TestAnOpeningWhoseFirstUnreadIsUnavailableShowsTheNewest(t *testing.T) {
	p, b, c, f := openingFromRead(t)
	for i := 0; i < 3; i++ {
		if i > 0 {
			f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
		}
		c.answer(f, map[string]any{"op": "error", "code": "unavailable", "message": "history is unavailable right now; retry shortly"})
	}
	drawn := `!!document.querySelector('#messages .msg[data-msgid="3000"]')`
	for deadline := time.Now().Add(10 * time.Second); !browsertest.Eval[bool](b, drawn); {
		if time.Now().After(deadline) {
			t.Fatalf("the page after the read cursor refused three times, the newest, 3000, is not drawn within 10 s (the group shows %s); want the view made of the newest", shownRange(b))
		}
		if f := c.next("pull", 200*time.Millisecond); f != nil {
			answerPull(c, f, 3000, plain)
		}
	}
	pastTheReadInterval(t, b)
	if read := p.maxCursor("read"); read > 10 {
		t.Fatalf("brought to the newest past the unread messages it could not get, the page read up to %d; want nothing past 10", read)
	}
	if msg := browsertest.Eval[string](b, `document.getElementById('toast').textContent`); !strings.Contains(msg, "unavailable") {
		t.Errorf("the page says %q; want it to say the history was unavailable", msg)
	}
}
