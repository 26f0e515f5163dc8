package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// The gateway goes down as the member's pulls begin (a crash, a restart
// that does not come back): the client waits to reconnect. The pull mode
// must still end within its wait and say what came, not hang until the
// user presses Ctrl-C.
func TestThePullModeEndsWhenTheGatewayGoesDown(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conns.Add(1) > 1 {
			http.Error(w, "down", http.StatusServiceUnavailable) // it does not come back
			return
		}
		serveFrames(w, r, func(req protocol.Request) any {
			switch req.Op {
			case protocol.OpAuth:
				return protocol.Authed{Op: protocol.OpAuthed, ID: req.ID, Uid: "bx-r0"}
			case protocol.OpSync:
				return protocol.Synced{Op: protocol.OpSynced, ID: req.ID, Groups: []protocol.GroupState{{Gid: "bx-g0", Head: 2, Ack: -1, Read: -1, Unread: 3, UnreadExact: true}}}
			}
			return nil // the first pull: the gateway is gone
		})
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	t0 := time.Now()
	r := pullOnce(ctx, srv.URL, "t", 100, []string{"bx-g0"}, [][]int64{{0, 1, 2}}, func(g, i int) string { return pullBody("bx", g, i, 64) }, nil, 2*time.Second)
	if took := time.Since(t0); took > 20*time.Second || r.Complete || r.Problem == "" {
		t.Fatalf("pull of a gateway gone down returned after %v: complete %v, problem %q; want it within its 2 s wait (plus the SDK's), incomplete, saying so",
			took.Round(time.Millisecond), r.Complete, r.Problem)
	}
}

// A server that pulls the right msgids with the wrong bodies (another
// message's, one cut short) fails the pull mode, one fault line each.
func TestThePullModeFailsOnAMsgidHandedWithAnotherBody(t *testing.T) {
	body := func(g, i int) string { return pullBody("bx", g, i, 64) }
	for _, c := range []struct {
		name string
		with func(msgs []protocol.Message)
	}{
		{"two bodies swapped", func(msgs []protocol.Message) { msgs[0].Body, msgs[1].Body = msgs[1].Body, msgs[0].Body }},
		{"a body cut short", func(msgs []protocol.Message) { msgs[2].Body = msgs[2].Body[:20] }},
	} {
		msgs := make([]protocol.Message, 3)
		for i := range msgs {
			msgs[i] = protocol.Message{Gid: "bx-g0", MsgID: int64(10 + i), Sender: "bx-s0", SentAt: 1, Body: body(0, i)}
		}
		srv := historyGateway(t, map[string]map[string][]protocol.Message{"bx-r0": {"bx-g0": msgs}})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		want := [][]int64{{10, 11, 12}}
		if r := pullOnce(ctx, srv.URL, "bx-r0", 100, []string{"bx-g0"}, want, body, nil, 10*time.Second); !r.Complete {
			t.Fatalf("%s: the history as sent: incomplete: %s", c.name, r.Problem)
		}
		c.with(msgs)
		r := pullOnce(ctx, srv.URL, "bx-r0", 100, []string{"bx-g0"}, want, body, nil, 10*time.Second)
		cancel()
		if r.Complete || len(r.Faults) == 0 {
			t.Errorf("%s: the right msgids with the wrong bodies pass the pull mode: complete %v, problem %q, faults %q", c.name, r.Complete, r.Problem, r.Faults)
		}
	}
}
