package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/groupchat/chatd/client"
)

// A send that finds no connected sender (every sender churned away) was
// due and never went out. It must count as scheduled and failed, or the
// printed "N scheduled, M failed" and the judge's accepted/scheduled ratio
// leave it out.
func TestASendWithoutSenderIsScheduledAndFailed(t *testing.T) {
	cfg := &Config{Prefix: "bx", BodySize: 64, SendTimeout: 1}
	p := &plan{uids: []string{"bx-u0"}, gids: []string{"bx-g0"}, members: [][]int{{0}}, groupsOf: [][]int{{0}},
		online: []int{0}, senders: []pair{{0, 0}}}
	b := &bench{cfg: cfg, plan: p, rec: newRecorder(), byUser: []*member{{user: 0, got: map[string][]sendRef{}}},
		accepted: make([][]sendRef, 1)}
	b.members = b.byUser // the one member is away (no client)
	for k := 0; k < 10; k++ {
		b.send(context.Background(), k)
	}
	var r result
	r.Sends.Scheduled, r.Sends.Accepted, r.Sends.Failed = b.rec.scheduled.Load(), b.rec.accepted.Load(), b.rec.failed.Load()
	if r.Sends.Scheduled != 10 || r.Sends.Failed != 10 {
		t.Fatalf("10 sends due, none could go out: counted scheduled %d, accepted %d, failed %d; errors %v",
			r.Sends.Scheduled, r.Sends.Accepted, r.Sends.Failed, b.rec.errors())
	}
}

// A login that fails (a member back from churn, an offline member after the
// run, an idle connection) is counted as a failed dial, not as "other",
// which tells the reader nothing.
func TestFailedDialsAreCountedAsSuch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/dev/token" {
			fmt.Fprint(w, `{"token":"t"}`)
			return
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable) // every WebSocket dial fails
	}))
	defer srv.Close()
	ctx := context.Background()
	b := offlineBench(srv.URL)
	if err := b.dial(ctx, b.byUser[0]); errorCode(err) != "dial_failed" {
		t.Errorf("a churned member's redial failed with %v: code %q, want dial_failed", err, errorCode(err))
	}
	res := b.offlineCheck(ctx, newAPI(srv.URL, "admin", 1), b.offlineCount())
	if fmt.Sprint(res.Errors) != "map[dial_failed:3]" {
		t.Errorf("3 offline members could not log in: errors %v, want dial_failed=3", res.Errors)
	}
	rec := newRecorder()
	dialIdle(ctx, &Config{Concurrency: 1}, []string{srv.URL}, []string{"t", "t"}, make([]*client.Client, 2), 0, 2, rec)
	if fmt.Sprint(rec.errors()) != "map[dial_failed:2]" {
		t.Errorf("2 idle connections could not log in: errors %v, want dial_failed=2", rec.errors())
	}
}
