package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/groupchat/chatd/internal/browsertest"
)

// A forward pull of several pages while live pushes come in: pushes that
// follow the contiguous cursor are taken at once, so the next page (cut
// short by the server's 1 MiB limit, more: true) may bring only messages
// the page already holds. That is no error: the page goes on pulling from
// its new cursor and finishes opening the group.
func TestPushesOvertakingAForwardPullAreNoError(t *testing.T) {
	_, b, c := listed(t, 20, 10, 10)
	f := openG(b, c)
	var first []map[string]any
	for id := int64(11); id <= 20; id++ {
		first = append(first, msg(id, noPrev, "v", "m"))
	}
	c.answer(f, page(f, true, 20, first...))
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == 20.0 })
	var live []any
	for id := int64(21); id <= 30; id++ {
		live = append(live, msg(id, id-1, "v", "live"))
	}
	c.write(map[string]any{"op": "push", "msgs": live})
	b.WaitUntil("the live pushes taken", `chat.group('g').contig === 30`)
	var cut []map[string]any
	for id := int64(21); id <= 25; id++ {
		cut = append(cut, msg(id, noPrev, "v", "live"))
	}
	c.answer(f, page(f, true, 30, cut...))
	if f = c.next("pull", 5*time.Second); f == nil || f["after"] != 30.0 {
		t.Fatalf("after a page of messages it already held (pushes overtook the pull), the page pulled %v, want a pull after 30; page %s", f, b.State())
	}
	c.answer(f, page(f, false, 30))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 30))
	// The view focuses the composer once the opening has ended, after an
	// error of it was shown.
	b.WaitUntil("the group opened", `document.activeElement === document.querySelector('#composer [name=body]')`)
	if toast := browsertest.Eval[string](b, `document.getElementById('toast').hidden ? '' : document.getElementById('toast').textContent`); toast != "" {
		t.Fatalf("opening the group showed the error %q", toast)
	}
}

// The badge of a group that is not open: the sync counted the messages the
// server had stored; their pushes, when they come after the sync (the
// fan-out lagging the persister), must not count them a second time.
func TestPushesAlreadyCountedBySyncAreNotCountedAgain(t *testing.T) {
	_, b, c := listed(t, 12, 10, 10) // 11 and 12 unread
	b.WaitUntil("the badge", `document.querySelector('#groups li[data-gid=g] .badge')?.textContent === '2'`)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(11, 10, "v", "m11"), msg(12, 11, "v", "m12"), msg(13, 12, "v", "m13")}})
	b.WaitUntil("the pushes taken", `chat.group('g').contig === 13`)
	listDrawn(b)
	if got := browsertest.Eval[string](b, `document.querySelector('#groups li[data-gid=g] .badge')?.textContent`); got != "3" {
		t.Fatalf("11 and 12 counted by the sync, 13 pushed after: the badge says %q unread, want 3", got)
	}
}

// A push of a group the page does not know (the user was just added)
// makes it sync. The fan-out may push before the membership reaches the
// store the sync reads: while the group stays unknown, its pushes must
// make the page sync again, not leave the group unlisted until the next
// heartbeat (25 s).
func TestAGroupPushedBeforeItsSyncListsItIsSyncedAgain(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	c.write(map[string]any{"op": "push", "msgs": []any{map[string]any{"gid": "g2", "msgid": 5, "prev": 4, "sender": "v", "sent_at": 1763700000000, "cmid": "x5", "body": "hi"}}})
	f := c.expect("sync", nil)
	synced(c, f, 10, 10, 10) // g2 not yet
	for id := 6; id <= 8; id++ {
		time.Sleep(300 * time.Millisecond)
		c.write(map[string]any{"op": "push", "msgs": []any{map[string]any{"gid": "g2", "msgid": id, "prev": id - 1, "sender": "v", "sent_at": 1763700000000, "cmid": fmt.Sprint("x", id), "body": "hi"}}})
	}
	f = c.next("sync", 5*time.Second)
	if f == nil {
		t.Fatalf("g2 is pushed but unknown, and the page has not synced again within 5 s; page %s", b.State())
	}
	c.answer(f, map[string]any{"op": "synced", "groups": []any{
		map[string]any{"gid": "g", "head": 10, "ack": 10, "read": 10, "unread": 0, "unread_exact": true},
		map[string]any{"gid": "g2", "head": 8, "ack": 4, "read": 4, "unread": 4, "unread_exact": true}}})
	b.WaitUntil("g2 listed", `document.querySelector('#groups li[data-gid=g2] .badge')?.textContent === '4'`)
}

// A resend the server wrote twice comes as two pushes of one send (same
// sender and cmid, two msgids): the history keeps the first only. The page
// shows the send once, and goes on past the second record: the next
// message is shown and acked.
func TestASendWrittenTwiceIsShownOnce(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	f := openG(b, c)
	c.answer(f, page(f, false, 10))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 11.0 })
	c.answer(f, page(f, false, 10, msg(10, noPrev, "v", "m10")))
	b.WaitUntil("the history shown", `document.querySelectorAll('#messages .msg').length === 1`)

	first, second := msg(11, 10, "v", "hello"), msg(12, 11, "v", "hello")
	second["cmid"] = first["cmid"]
	c.write(map[string]any{"op": "push", "msgs": []any{first}})
	c.write(map[string]any{"op": "push", "msgs": []any{second, msg(13, 12, "v", "later")}})
	b.WaitUntil("later shown", `chat.group('g').contig === 13 && document.querySelectorAll('#messages .msg').length >= 3`)
	if got, want := b.Bodies(), []string{"m10", "hello", "later"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the page shows %q, want %q: one send shown twice", got, want)
	}
	if n := browsertest.Eval[int](b, `chat.stats.duplicates`); n != 1 {
		t.Errorf("the page counted %d duplicates, want 1", n)
	}
	flushCursors(t, b)
	if top := p.maxCursor("ack"); top != 13 {
		t.Errorf("the page acked up to %d, want 13: past the second record of the send", top)
	}
	if pr := b.TakeProblems(); len(pr) > 0 {
		t.Errorf("the page logged errors: %v", pr)
	}
}

// A cmid used again past the server's dedup window (24 h) is a new
// message (PROTOCOL.md): the page hid it as a second record of the first,
// pushed or paged up to.
func TestACmidUsedAgainAfterADayIsANewMessage(t *testing.T) {
	const day = 24 * 3600 * 1000
	_, b, c := listed(t, 10, 9, 9)
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	// 10 used cmid "again", as 9 did two days before and 11 does a day
	// later.
	old, first, later := msg(9, -2, "v", "two days ago"), msg(10, -2, "v", "yesterday"), msg(11, 10, "v", "today")
	old["cmid"], first["cmid"], later["cmid"] = "again", "again", "again"
	old["sent_at"] = first["sent_at"].(int64) - 2*day
	later["sent_at"] = first["sent_at"].(int64) + day + 1
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 9.0 })
	c.answer(f, page(f, false, 10, first))
	f = c.expect("pull", func(f map[string]any) bool { return f["before"] == 10.0 })
	c.answer(f, page(f, false, 10, old))
	b.WaitUntil("the older page taken", `!chat.group('g').loadingOlder && chat.stats.olderPulls === 1`)
	c.write(map[string]any{"op": "push", "msgs": []any{later}})
	b.WaitUntil("11 taken", `chat.group('g').contig === 11`)
	roundTrip(t, b)
	if got, want := b.Bodies(), []string{"two days ago", "yesterday", "today"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the page shows %q, want %q: one cmid used a day or more apart is three messages", got, want)
	}
}
