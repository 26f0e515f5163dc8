package web

import (
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/browsertest"
)

// A user in 2,000 groups: a push to a group that is not open costs the
// page little, whatever the number of groups. The group list was made
// anew, every element, at every such push (twice: its badge, then its
// message), 38 ms at 2,000 groups, and the acks' timer looked at every
// group for every message: 200 pushes, each its own frame, took 16 s of
// the page's one thread (3.8 s at 500 groups). They take 0.1 s now, and
// the list shows every count.
func TestPushesToAUserInThousandsOfGroupsCostLittle(t *testing.T) {
	const n, pushes = 2000, 200
	_, b, c := listedGroups(t, "", hGroups(n, 1, 1))
	b.WaitUntil("every group listed", fmt.Sprintf(`document.querySelectorAll('#groups li').length === %d`, n))
	start := time.Now()
	for i := range pushes {
		m := msg(2, 1, "v", "hi")
		m["gid"] = fmt.Sprint("h", i)
		c.write(map[string]any{"op": "push", "msgs": []any{m}})
	}
	b.WaitUntil("every push taken", fmt.Sprintf(`chat.stats.pushes === %d`, pushes))
	took := time.Since(start)
	listDrawn(b)
	if got := browsertest.Eval[int](b, `document.querySelectorAll('#groups .badge').length`); got != pushes {
		t.Errorf("%d groups show a count, want %d", got, pushes)
	}
	if title := browsertest.Eval[string](b, `document.title`); title != fmt.Sprintf("(%d) chatd", pushes) {
		t.Errorf("the title is %q", title)
	}
	if took > 4*time.Second {
		t.Errorf("%d pushes to as many groups of %d, not open, took the page %v", pushes, n, took)
	}
	t.Logf("%d pushes to closed groups among %d: %v", pushes, n, took)
}
