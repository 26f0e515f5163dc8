package main

import (
	"context"
	"testing"
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
