package web

import (
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
	b.Run(chromedp.Click(chromedp.CSS(`#groups li[data-gid=g] button`)))
	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
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
	time.Sleep(500 * time.Millisecond)
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
	if got := browsertest.Eval[string](b, `document.querySelector('#groups li[data-gid=g] .badge')?.textContent`); got != "3" {
		t.Fatalf("11 and 12 counted by the sync, 13 pushed after: the badge says %q unread, want 3", got)
	}
}
