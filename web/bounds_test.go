package web

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/groupchat/chatd/internal/browsertest"
)

// maxUnlisted is MAX_UNLISTED in static/groups.js.
const maxUnlisted = 16

// A server pushing messages of ever new groups that no sync names has the
// page keep at most maxUnlisted of them, those pushed to most recently,
// and say so once. Those it forgot come back with the sync that names
// them; one it kept has its pushes joined on. Each such group was kept,
// with up to 1,000 pushes, for the life of the page.
func TestGroupsNoSyncNamedAreBounded(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	watchWarnings(b)
	const n = 100
	for i := range n {
		m := msg(5, 4, "v", fmt.Sprint("m5 of h", i))
		m["gid"] = fmt.Sprint("h", i)
		c.write(map[string]any{"op": "push", "msgs": []any{m}})
	}
	b.WaitUntil("every push taken", fmt.Sprintf(`chat.stats.pushes === %d`, n))
	held := groupsHeld(b)
	if len(held) > 1+maxUnlisted {
		t.Fatalf("after pushes of %d groups no sync named the page holds %d groups, want at most %d", n, len(held), 1+maxUnlisted)
	}
	if !slices.Contains(held, "g") || !slices.Contains(held, fmt.Sprint("h", n-1)) || slices.Contains(held, "h0") {
		t.Errorf("the page holds %q, want g and the groups pushed last", held)
	}

	entry := func(gid string) map[string]any {
		return map[string]any{"gid": gid, "head": 5, "ack": 4, "read": 4, "unread": 1, "unread_exact": true}
	}
	last := fmt.Sprint("h", n-1)
	c.answer(c.expect("sync", nil), map[string]any{"op": "synced", "groups": []any{
		map[string]any{"gid": "g", "head": 10, "ack": 10, "read": 10, "unread": 0, "unread_exact": true},
		entry("h0"), entry(last)}})
	b.WaitUntil("h0 listed with its count", `document.querySelector('#groups li[data-gid=h0] .badge')?.textContent === '1'`)
	b.WaitUntil("the kept push of "+last+" joined on", fmt.Sprintf(`chat.group(%q).contig === 5`, last))
	said := 0
	for _, w := range browsertest.Eval[[]string](b, `window.warned`) {
		if strings.Contains(w, "no sync names") {
			said++
		}
	}
	if said != 1 {
		t.Errorf("the page warned %d times of groups forgotten, want once", said)
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
}

// The pushes the open group holds back while its gap is pulled are
// bounded as a closed group's are; those dropped are pulled at the
// group's next push. A server pushing ever later msgids, none joining on,
// and slow to answer the pull, had the open group hold every one.
func TestPushesHeldBackInTheOpenGroupAreBounded(t *testing.T) {
	p, b, c := listed(t, 10, 10, 10)
	opened(c, b, "v")
	const n, maxBuf = 1500, 1000 // maxBuf: MAX_BUF in static/groups.js
	for from := 100; from < 100+n; from += 500 {
		var ms []any
		for id := from; id < from+500; id++ {
			ms = append(ms, msg(int64(id), int64(id-1), "v", fmt.Sprint("m", id)))
		}
		c.write(map[string]any{"op": "push", "msgs": ms})
	}
	b.WaitUntil("every push taken", fmt.Sprintf(`chat.stats.pushes === %d`, n))
	if got := browsertest.Eval[int](b, `chat.group('g').buf.size`); got > maxBuf {
		t.Fatalf("the open group holds back %d pushes, want at most %d", got, maxBuf)
	}

	f := c.expect("pull", func(f map[string]any) bool { return f["after"] == 10.0 })
	var gap []map[string]any
	for id := int64(11); id < 100; id++ {
		gap = append(gap, msg(id, noPrev, "v", fmt.Sprint("m", id)))
	}
	c.answer(f, page(f, false, 99, gap...))
	waitCursor(t, p, b, "ack", 100+maxBuf-1)

	// The next push finds the gap where the pushes were dropped.
	last := int64(100 + n)
	c.write(map[string]any{"op": "push", "msgs": []any{msg(last, last-1, "v", fmt.Sprint("m", last))}})
	f = c.expect("pull", func(f map[string]any) bool { return f["after"] == float64(100+maxBuf-1) })
	var rest []map[string]any
	for id := int64(100 + maxBuf); id <= last; id++ {
		rest = append(rest, msg(id, noPrev, "v", fmt.Sprint("m", id)))
	}
	c.answer(f, page(f, false, last, rest...))
	waitCursor(t, p, b, "ack", last)
	// The open group holds 1,000 (keepOpen), from its oldest unread: the
	// newest come back as the view comes down to them.
	if got := browsertest.Eval[[]int](b, `[...document.querySelectorAll('#messages .msg')].map((li) => Number(li.dataset.msgid)).concat(Math.max(chat.group('g').read, chat.group('g').readWant))`); len(got) != keepOpen+1 || got[0] > got[keepOpen]+1 {
		t.Errorf("the group shows %d messages from %v, read up to %d; want 1,000 from the oldest unread", len(got)-1, got[:1], got[len(got)-1])
	}
	scrollDownTo(t, b, c, last)
	if n := browsertest.Eval[int](b, `document.querySelectorAll('#messages .msg').length`); n > keepOpen {
		t.Errorf("scrolled down to m%d, the group shows %d messages, want at most 1,000", last, n)
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
}

// A group an earlier sync named that the latest does not is forgotten,
// unless the user has it open: a server naming new groups at every sync
// had the page keep, and list, every one of them for the life of the page.
func TestGroupsTheLatestSyncDoesNotNameAreForgotten(t *testing.T) {
	_, b, c := listed(t, 10, 10, 10)
	opened(c, b, "v")
	const rounds, per = 5, 50
	for r := range rounds {
		gs := []any{}
		for i := range per {
			gs = append(gs, map[string]any{"gid": fmt.Sprintf("x%d-%d", r, i), "head": 3, "ack": 1, "read": 1, "unread": 2, "unread_exact": true})
		}
		c.write(map[string]any{"op": "resync", "reason": "push_route"})
		c.answer(c.expect("sync", nil), map[string]any{"op": "synced", "groups": gs})
		b.WaitUntil("the round's groups listed", fmt.Sprintf(`document.querySelector('#groups li[data-gid="x%d-0"]')`, r))
	}
	held := groupsHeld(b)
	if len(held) != 1+per || !slices.Contains(held, "g") {
		t.Fatalf("after %d syncs of %d new groups each the page holds %d groups (g among them: %v), want the last sync's and the open g",
			rounds, per, len(held), slices.Contains(held, "g"))
	}
	listedNow := browsertest.Eval[[]string](b, `[...document.querySelectorAll('#groups li')].map((li) => li.dataset.gid)`)
	for _, gid := range listedNow {
		if gid != "g" && !strings.HasPrefix(gid, fmt.Sprintf("x%d-", rounds-1)) {
			t.Fatalf("the page lists %s, which the latest sync does not name", gid)
		}
	}
	if p := b.TakeProblems(); len(p) > 0 {
		t.Errorf("the page threw: %v", p)
	}
}
