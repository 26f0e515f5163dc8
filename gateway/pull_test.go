package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
)

// Scrolling up: pull with before pages from the newest message down to
// where the member joined, and stops where a member who left left.
func TestPullBeforePagesUpWithinMembership(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "dave")
	alice := e.login(0, "alice")
	send := func(body string) int64 {
		t.Helper()
		f := alice.call(map[string]any{"op": "send", "gid": "g1", "cmid": "c-" + body, "body": body})
		if f["op"] != "accepted" {
			t.Fatalf("send %s: %v", body, f)
		}
		return int64(f["msgid"].(float64))
	}
	early := send("before-carol")
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "carol"}); st != 200 {
		t.Fatalf("add carol: %d %v", st, out)
	}
	e.waitMembers("g1", "carol")
	var ids []int64
	for i := range 12 {
		ids = append(ids, send(fmt.Sprint("m", i)))
	}
	e.removeMember("g1", "dave")
	// The leave names dave's join, at the empty group's -1, so compaction
	// of the join cannot take his stretch from him.
	if l := e.lastMemberEvent("g1", "dave"); l.Op != schema.OpLeave || !l.HasJoined || l.Joined != -1 || l.By != "admin" {
		t.Fatalf("dave's leave %+v does not name his join at -1", l)
	}
	last := send("after-dave")
	waitFor(t, "persisted", 10*time.Second, func() bool { h, _ := e.redis.Head(context.Background(), "g1"); return h == last })

	pageUp := func(r *raw, limit int) (got []int64, pages int) {
		t.Helper()
		before := int64(1) << 50
		for {
			p := r.call(map[string]any{"op": "pull", "gid": "g1", "before": before, "limit": limit})
			if p["op"] != "page" || p["before"] != float64(before) {
				t.Fatalf("pull before %d: %v", before, p)
			}
			pages++
			var page []int64
			for _, m := range p["msgs"].([]any) {
				page = append(page, int64(m.(map[string]any)["msgid"].(float64)))
			}
			if len(page) > limit {
				t.Fatalf("a page of %d, limit %d", len(page), limit)
			}
			got = append(page, got...)
			if p["more"] != true {
				return got, pages
			}
			before = page[0]
		}
	}
	carol := e.login(0, "carol")
	got, pages := pageUp(carol, 5)
	if want := append(append([]int64(nil), ids...), last); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("carol paged up %v, want %v (nothing from before she joined, %d)", got, want, early)
	}
	if pages != 3 {
		t.Errorf("13 messages in pages of 5 took %d pages, want 3", pages)
	}
	dave := e.login(0, "dave")
	got, _ = pageUp(dave, 100)
	if want := append([]int64{early}, ids...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dave, who left, paged up %v, want %v", got, want)
	}
	p := dave.call(map[string]any{"op": "pull", "gid": "g1", "before": last + 1})
	if p["head"] != float64(ids[11]) {
		t.Errorf("dave's head = %v, want where he left (%d)", p["head"], ids[11])
	}
	// The HTTP API takes before too.
	st, page := e.http("GET", fmt.Sprintf("/v1/groups/g1/messages?before=%d&limit=2", ids[5]), e.token("carol"), nil)
	if msgs, _ := page["msgs"].([]any); st != 200 || len(msgs) != 2 || msgs[1].(map[string]any)["msgid"] != float64(ids[4]) || page["more"] != true {
		t.Fatalf("GET ?before=%d&limit=2: %d %v", ids[5], st, page)
	}
	if st, out := e.http("GET", "/v1/groups/g1/messages?before=-3", e.token("carol"), nil); st != 400 || out["message"] == "" {
		t.Fatalf("GET ?before=-3: %d %v, want 400 with a message", st, out)
	}
}
