package web

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/groupchat/chatd/internal/browsertest"
)

// A message whose sent_at is no date a browser can show (a record written
// to chat.messages by another producer: any int64 is a valid SentAt) is
// drawn without its time. It threw while drawn, and every message after it
// in the same page was never drawn, though held, acked and later marked
// read with the rest.
func TestAMessageWithAnImpossibleTimeDoesNotHideThoseAfterIt(t *testing.T) {
	_, b, c := listed(t, 13, 10, 10)
	f := openG(b, c)
	odd := msg(12, -2, "v", "m12")
	odd["sent_at"] = int64(9e18)
	c.answer(f, page(f, false, 13, msg(11, -2, "v", "m11"), odd, msg(13, -2, "v", "m13")))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 13))
	b.WaitUntil("11, 12 (sent_at 9e18) and 13 drawn", `document.querySelectorAll('#messages .msg').length === 3`)
	if got := b.Bodies(); len(got) != 3 {
		t.Fatalf("the page of 11, 12 (sent_at 9e18) and 13 shows %q, want all three; problems %v", got, b.Problems())
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
	if got := browsertest.Eval[string](b, `document.querySelector('#messages .msg[data-msgid="12"] time').textContent`); got != "" {
		t.Errorf("the impossible time is shown as %q, want nothing", got)
	}
}

// An answer that comes after its request timed out is for a request the
// page has given up on and redone: a late refusal of a send that its
// resend got through must not be shown as an error.
func TestALateRefusalOfARequestGivenUpOnIsNotShown(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	f := openG(b, c)
	c.answer(f, page(f, false, 10))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 10))
	browsertest.Eval[bool](b, `(document.getElementById('composer').body.value = 'hi', document.getElementById('composer').requestSubmit(), true)`)
	first := c.expect("send", nil)
	again := c.expect("send", func(f map[string]any) bool { return f["id"] != first["id"] }) // after the 10 s timeout
	if again["cmid"] != first["cmid"] {
		t.Fatalf("the resend has cmid %v, the send %v", again["cmid"], first["cmid"])
	}
	c.answer(again, map[string]any{"op": "accepted", "gid": "g", "cmid": again["cmid"], "msgid": 11})
	c.answer(first, map[string]any{"op": "error", "code": "overloaded", "message": "the gateway has more sends in hand than it can take in time"})
	roundTrip(t, b) // its answer comes after the refusal: the page has handled the refusal
	if toast := browsertest.Eval[string](b, `document.getElementById('toast').hidden ? '' : document.getElementById('toast').textContent`); toast != "" {
		t.Fatalf("the late refusal of a send whose resend was accepted is shown: %q", toast)
	}
}

// watchWarnings keeps the page's console warnings from now on in
// window.warned, to show that what was dropped was said.
func watchWarnings(b *browsertest.Tab) {
	browsertest.Eval[bool](b, `(window.warned = [], console.warn = ((w) => (...a) => { window.warned.push(a.join(' ')); w(...a); })(console.warn), true)`)
}

// warned fails t unless the page warned at least n times.
func warned(t *testing.T, b *browsertest.Tab, n int) {
	t.Helper()
	if got := browsertest.Eval[[]string](b, `window.warned`); len(got) < n {
		t.Errorf("the page warned %d times (%q), want at least %d: what it dropped goes unsaid", len(got), got, n)
	}
}

// waitCursor waits until the page has sent op upto want.
func waitCursor(t *testing.T, p *peer, b *browsertest.Tab, op string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.maxCursor(op) != want {
		if time.Now().After(deadline) {
			t.Fatalf("the page sent %s upto %d, want %d; page %s", op, p.maxCursor(op), want, b.State())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// groupsHeld is every gid the page holds state for, listed or not.
func groupsHeld(b *browsertest.Tab) []string {
	return browsertest.Eval[[]string](b, `[...chat.groups.keys()].map(String)`)
}

// opened opens g (head 10) and answers its loading with message 10.
func opened(c *peerConn, b *browsertest.Tab, sender string) {
	f := openG(b, c)
	c.answer(f, page(f, false, 10))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 10, msg(9, noPrev, sender, "m9"), msg(10, noPrev, sender, "m10")))
	b.WaitUntil("the history shown", `document.querySelectorAll('#messages .msg').length === 2`)
}

// A receipts frame is best effort, and one with bad parts (counts that are
// no list, no gid, an entry that is null or names no msgid, a count that
// is no number) drops those parts. The null threw and left the good counts
// after it unshown; a msgid "10" was shown on message 10 as read by 7.
func TestMalformedReceiptsAreDroppedAndTheRestShown(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	opened(c, b, "u")
	b.WaitUntil("the receipts drawn", `document.querySelectorAll('#messages .receipt').length === 2`)
	watchWarnings(b)
	c.write(map[string]any{"op": "receipts", "gid": "g", "counts": map[string]any{"msgid": 10, "read": 2, "audience": 2}})
	c.write(map[string]any{"op": "receipts", "counts": []any{map[string]any{"msgid": 10, "read": 2, "audience": 2}}})
	c.write(map[string]any{"op": "receipts", "gid": "g", "counts": []any{
		nil,
		map[string]any{"msgid": `x"]`, "read": 1, "audience": 1},
		map[string]any{"msgid": 9, "read": 1, "audience": 2},
		map[string]any{"msgid": "10", "read": 7, "audience": 2},
		map[string]any{"msgid": 10, "read": "all"},
	}})
	b.WaitUntil("the good count shown", browsertest.ReceiptOf("m9")+` === 'read by 1'`)
	if got := browsertest.Eval[string](b, browsertest.ReceiptOf("m10")); got != "read by 0" {
		t.Errorf("message 10 shows %q from counts that name no msgid or no number, want read by 0", got)
	}
	droppedQuietly(t, b, 5)
}

// A page whose msgs is no list is an empty page; a message in a page that
// is null, names no msgid (or one that is no integer) or another group is
// dropped; a page without head leaves the head as it was. msgs "none"
// threw, the group's loading stopped and its history was never asked; a
// missing head made the group's head NaN for good, and the heartbeat never
// again pulled messages whose pushes were lost.
func TestMalformedPagesAreDroppedAndTheRestShown(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	watchWarnings(b)
	f := openG(b, c)
	c.answer(f, map[string]any{"op": "page", "gid": "g", "after": 10, "msgs": "none", "more": false, "head": 10})
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	other := msg(7, noPrev, "v", "m7 of h")
	other["gid"] = "h"
	c.answer(f, page(f, false, 10, nil,
		map[string]any{"gid": "g", "sender": "v", "body": "no msgid"},
		map[string]any{"gid": "g", "msgid": 6.5, "sender": "v", "body": "msgid 6.5"},
		other, msg(8, noPrev, "v", "m8"), msg(10, noPrev, "v", "m10")))
	b.WaitUntil("the history shown", `document.querySelectorAll('#messages .msg').length >= 2`)
	roundTrip(t, b) // the rest of the page, if it were drawn
	if got := b.Bodies(); len(got) != 2 || got[0] != "m8" || got[1] != "m10" {
		t.Fatalf("the older page shows %q, want m8 and m10 only", got)
	}

	// Message 11's push is lost; the sync of a resync frame finds it.
	c.write(map[string]any{"op": "resync", "reason": "push_route"})
	synced(c, c.expect("sync", nil), 11, 10, 10)
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	headless := page(f, false, 11, msg(11, noPrev, "v", "m11"), map[string]any{"gid": "g", "msgid": nil, "body": "msgid null"})
	delete(headless, "head")
	c.answer(f, headless)
	b.WaitUntil("m11 shown", `document.querySelectorAll('#messages .msg').length === 3`)
	// And message 12's.
	c.write(map[string]any{"op": "resync", "reason": "push_route"})
	synced(c, c.expect("sync", nil), 12, 10, 10)
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 11.0 })
	c.answer(f, page(f, false, 12, msg(12, noPrev, "v", "m12")))
	b.WaitUntil("m12 shown", `document.querySelectorAll('#messages .msg').length === 4`)
	quietWarned(t, b, 6)
}

// A push frame that is null or whose msgs is no list is dropped, and so is
// a pushed message that is null, has no gid, or a msgid that is no
// integer; the rest of the frame is taken. A msgid "x" made the group's
// contiguous cursor NaN (nothing after it was ever shown or acked), 10.5
// was acked as such, null threw and dropped the rest of the frame, and a
// message without gid made a group "undefined".
func TestMalformedPushesAreDroppedAndTheRestShown(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	opened(c, b, "v")
	watchWarnings(b)
	c.write(nil)
	c.write(map[string]any{"op": "push", "msgs": map[string]any{"gid": "g", "msgid": 11, "prev": 10}})
	nogid := msg(11, 10, "v", "no gid")
	delete(nogid, "gid")
	x := msg(11, 10, "v", "msgid x")
	x["msgid"] = "x"
	half := msg(11, 10, "v", "msgid 10.5")
	half["msgid"] = 10.5
	c.write(map[string]any{"op": "push", "msgs": []any{nogid, x, half, nil, msg(11, 10, "v", "m11")}})
	c.write(map[string]any{"op": "push", "msgs": []any{msg(12, 11, "v", "m12")}})
	b.WaitUntil("m11 and m12 shown", `document.querySelectorAll('#messages .msg').length >= 4`)
	if got := b.Bodies(); len(got) != 4 || got[2] != "m11" || got[3] != "m12" {
		t.Fatalf("the group shows %q, want m9 to m12", got)
	}
	waitCursor(t, p, b, "ack", 12)
	droppedQuietly(t, b, 6)
}

// A sync answer whose groups is no list is one without groups, and an
// entry that is null, has no gid, or lacks a cursor (head, ack, read) is
// dropped; an unread that is no count is 0. groups {} threw, and every
// session ended at its first sync; an entry without gid was a group
// "undefined" whose name threw while the list was drawn; one without
// cursors made them NaN for good (its first pull was after null), and one
// without unread made its badge NaN, so no push ever showed on it.
func TestMalformedSyncEntriesAreDropped(t *testing.T) {
	p := newPeer(t)
	b := browsertest.NewTab(t, browsertest.Start(t), "u")
	signIn(t, p, b)
	c := p.nextConn()
	b.WaitUntil("the page loaded", `window.chat`)
	watchWarnings(b)
	c.answer(c.expect("sync", nil), map[string]any{"op": "synced", "groups": map[string]any{"gid": "g"}})
	b.WaitUntil("online", `document.getElementById('status').textContent === 'online'`)

	c.write(map[string]any{"op": "resync", "reason": "push_route"})
	c.answer(c.expect("sync", nil), map[string]any{"op": "synced", "groups": []any{
		nil,
		map[string]any{"head": 5, "ack": 5, "read": 5, "unread": 0, "unread_exact": true},
		map[string]any{"gid": "h", "head": 7},
		map[string]any{"gid": "g", "head": 10, "ack": 10, "read": 10, "unread_exact": true},
	}})
	b.WaitUntil("g listed", `document.querySelector('#groups li[data-gid=g] button')`)
	if got := browsertest.Eval[[]string](b, `[...document.querySelectorAll('#groups li')].map((li) => li.dataset.gid)`); len(got) != 1 {
		t.Errorf("the page lists %q, want g only", got)
	}
	c.write(map[string]any{"op": "push", "msgs": []any{msg(11, 10, "v", "m11")}})
	b.WaitUntil("m11 counted", `document.querySelector('#groups li[data-gid=g] .badge')?.textContent === '1'`)

	c.write(map[string]any{"op": "resync", "reason": "push_route"})
	c.answer(c.expect("sync", nil), map[string]any{"op": "synced", "groups": []any{
		map[string]any{"gid": "g", "head": 11, "ack": 10, "read": 10, "unread": 1, "unread_exact": true},
		map[string]any{"gid": "h", "head": 7, "ack": 5, "read": 5, "unread": 2, "unread_exact": true},
	}})
	b.WaitUntil("h listed", `document.querySelector('#groups li[data-gid=h] button')`)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=h] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["gid"] == "h" && f["before"] == nil })
	if f["after"] != 5.0 {
		t.Errorf("opening h pulls after %v, want after its ack, 5", f["after"])
	}
	quietWarned(t, b, 4)
}

// A readers answer whose read is no list, or that names a member with
// null or a number, shows the names it has. read "bob" threw, and the
// list was not shown at all.
func TestMalformedReadersAreDroppedAndTheRestShown(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	opened(c, b, "u")
	watchWarnings(b)
	b.Run(chromedp.Click(chromedp.CSS(`#messages .msg[data-msgid="10"] .receipt`)))
	f := c.expect("who_read", nil)
	c.answer(f, map[string]any{"op": "readers", "gid": "g", "msgid": 10, "read": "bob", "unread": []any{nil, "carol", 7}})
	b.WaitUntil("the readers shown", `!document.getElementById('readers').hidden`)
	read := browsertest.Eval[[]string](b, `[...document.querySelectorAll('#readers-read li')].map((li) => li.textContent)`)
	unread := browsertest.Eval[[]string](b, `[...document.querySelectorAll('#readers-unread li')].map((li) => li.textContent)`)
	if len(read) != 1 || read[0] != "nobody" || len(unread) != 1 || unread[0] != "carol" {
		t.Errorf("the readers shown are %q, the others %q; want nobody, and carol", read, unread)
	}
	quietWarned(t, b, 3)
}

// An error frame without a code or a message says so, not "undefined:
// undefined".
func TestAnErrorFrameWithoutWordsSaysSo(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	c.write(map[string]any{"op": "error"})
	b.WaitUntil("the notice shown", `!document.getElementById('toast').hidden`)
	if got := browsertest.Eval[string](b, `document.getElementById('toast').textContent`); got != "error: the server gave no reason" {
		t.Fatalf("the notice reads %q", got)
	}
	c.write(map[string]any{"op": "error", "code": 7, "message": "unavailable: try again"})
	b.WaitUntil("the second notice shown", `document.getElementById('toast').textContent.startsWith('error: unavailable')`)
}

// bogus is a msgid far ahead of any head of the peer's group: well formed,
// but no message of it.
const bogus = 1 << 50

// waitRefused waits until the peer has refused n acks or reads.
func waitRefused(t *testing.T, p *peer, b *browsertest.Tab, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.refusals() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the peer refused %d acks or reads, want %d; page %s", p.refusals(), n, b.State())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A pushed message of a msgid the group does not have, far ahead of its
// head, whose prev is the page's cursor, is taken: nothing tells it from a
// real one. The server refuses its ack and read as beyond_head, and the
// page takes the group up again from the cursor the server confirmed: the
// message goes, and the later real ones are shown, acked and read. The
// contiguous cursor had jumped: the refused ack was sent again every
// second for ever, and every later message was dropped as held already.
func TestAMsgidFarAheadOfTheHeadDoesNotWedgeTheOpenGroup(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	p.headAt(10)
	opened(c, b, "v")
	c.write(map[string]any{"op": "push", "msgs": []any{msg(bogus, 10, "v", "bogus")}})
	b.WaitUntil("the bogus message shown", `document.querySelectorAll('#messages .msg').length === 3`)
	p.headAt(11)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(11, 10, "v", "m11")}})
	waitRefused(t, p, b, 1)

	synced(c, c.expect("sync", nil), 11, 10, 10)
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	c.answer(f, page(f, false, 11, msg(11, noPrev, "v", "m11")))
	b.WaitUntil("m11 shown", `[...document.querySelectorAll('#messages .msg .body')].some((e) => e.textContent === 'm11')`)
	if got := b.Bodies(); len(got) != 3 || got[0] != "m9" || got[1] != "m10" || got[2] != "m11" {
		t.Fatalf("the group shows %q, want m9, m10 and m11", got)
	}
	waitCursor(t, p, b, "ack", 11)
	waitCursor(t, p, b, "read", 11)
	n := p.refusals()
	time.Sleep(2500 * time.Millisecond) // cursors are sent again after 1 s
	// What the page would send again later goes out now, and the round
	// trip after it comes back only once the peer has it.
	flushCursors(t, b)
	if got := p.refusals(); got != n {
		t.Errorf("the page sent %d more acks or reads the server refused as beyond_head", got-n)
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
}

// The same push in a group that is not open counts on its badge until the
// refusal of its ack has the page take the group up again: then the badge
// is the server's, and later real messages count on it and are acked. The
// bogus message counted for ever, and the head it raised kept every later
// push off the badge.
func TestAMsgidFarAheadOfTheHeadLeavesNoBadgeBehind(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	p.headAt(10)
	badge := `document.querySelector('#groups li[data-gid=g] .badge')?.textContent`
	c.write(map[string]any{"op": "push", "msgs": []any{msg(bogus, 10, "v", "bogus")}})
	b.WaitUntil("the bogus message counted", badge+` === '1'`)
	waitRefused(t, p, b, 1)

	synced(c, c.expect("sync", nil), 10, 10, 10)
	b.WaitUntil("the badge gone", badge+` === undefined`)
	p.headAt(12)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(11, 10, "v", "m11"), msg(12, 11, "v", "m12")}})
	b.WaitUntil("m11 and m12 counted", badge+` === '2'`)
	waitCursor(t, p, b, "ack", 12)
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
}

// The same msgid in a page: the page is taken, the ack refused, and the
// group pulled again from the cursor the server confirmed.
func TestAMsgidFarAheadOfTheHeadInAPageDoesNotWedgeTheGroup(t *testing.T) {
	p, b, c := listed(t, 11, 10, 10)
	p.headAt(11)
	f := openG(b, c)
	c.answer(f, page(f, false, 11, msg(bogus, noPrev, "v", "bogus")))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == float64(bogus) })
	c.answer(f, page(f, false, 11, msg(10, noPrev, "v", "m10")))
	waitRefused(t, p, b, 1)

	synced(c, c.expect("sync", nil), 11, 10, 10)
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	c.answer(f, page(f, false, 11, msg(11, noPrev, "v", "m11")))
	b.WaitUntil("m11 shown", `[...document.querySelectorAll('#messages .msg .body')].some((e) => e.textContent === 'm11')`)
	if got := b.Bodies(); len(got) != 2 || got[0] != "m10" || got[1] != "m11" {
		t.Fatalf("the group shows %q, want m10 and m11", got)
	}
	waitCursor(t, p, b, "ack", 11)
}

// droppedQuietly fails t unless the page holds group g only, threw
// nothing, and warned at least n times of what it dropped.
func droppedQuietly(t *testing.T, b *browsertest.Tab, n int) {
	t.Helper()
	if got := groupsHeld(b); len(got) != 1 || got[0] != "g" {
		t.Errorf("the page holds groups %q, want only g", got)
	}
	quietWarned(t, b, n)
}

// quietWarned fails t if the page threw, or warned fewer than n times of
// what it dropped.
func quietWarned(t *testing.T, b *browsertest.Tab, n int) {
	t.Helper()
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
	warned(t, b, n)
}
