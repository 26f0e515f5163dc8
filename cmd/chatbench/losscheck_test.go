package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Send 0 was accepted as msgid 10 and never reached the member; what the
// member got at msgid 10 is another send's body (send 1, whose own answer
// was lost to a client timeout, so it is not among the accepted). Send 0's
// body never came: the check must not pass.
func TestTheLossCheckMatchesBodiesNotOnlyMsgids(t *testing.T) {
	accepted := []sendRef{{msgid: 10, k: 0}}
	got := []sendRef{{msgid: 10, k: 1, gen: 1}}
	var l lossCheck
	l.checkOne("g", "u", accepted, got)
	l.verdict()
	if l.OK {
		t.Fatalf("send 0 (accepted as msgid 10) never reached the member, yet the loss check passes: %+v", l)
	}
}

// The same with both sends accepted: the sender of send 0 was told 10, the
// sender of send 1 was told 11; the member got send 1's body at 10 and
// nothing else. Send 0 is lost.
func TestTheLossCheckFindsALostSendAmongRenumberedOnes(t *testing.T) {
	accepted := []sendRef{{msgid: 10, k: 0}, {msgid: 11, k: 1}}
	got := []sendRef{{msgid: 10, k: 1, gen: 1}}
	var l lossCheck
	l.checkOne("g", "u", accepted, got)
	l.verdict()
	if l.OK {
		t.Fatalf("send 0's body never reached the member, yet the loss check passes: %+v", l)
	}
}

// offlineBench is a bench with one group of four users, user 0 online and
// users 1-3 offline, and two accepted messages, against the gateway at url.
func offlineBench(url string) *bench {
	cfg := &Config{Prefix: "bx", Concurrency: 1, Drain: time.Second, BodySize: 64, OfflineCheck: -1}
	p := &plan{
		uids: []string{"bx-u0", "bx-u1", "bx-u2", "bx-u3"}, gids: []string{"bx-g0"},
		members: [][]int{{0, 1, 2, 3}}, groupsOf: [][]int{{0}, {0}, {0}, {0}}, online: []int{0},
	}
	b := &bench{cfg: cfg, plan: p, dep: &deployment{URLs: []string{url}},
		byUser: []*member{{user: 0, got: map[string][]sendRef{}}, nil, nil, nil}, tokens: make([]string, 4),
		accepted: [][]sendRef{{{msgid: 0, k: 0}, {msgid: 1, k: 1}}}}
	return b
}

// The offline members cannot be logged in (the token endpoint fails): none
// of them is checked, so the check must not pass.
func TestTheOfflineCheckFailsWhenNobodyWasChecked(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	b := offlineBench(srv.URL)
	res := b.offlineCheck(context.Background(), newAPI(srv.URL, "admin", 1), b.offlineCount())
	full := &result{Offline: res}
	full.Loss.OK = true // the online members were fine
	if full.ok() {
		t.Fatalf("no offline member could log in, yet the run passes: checked %d of %d, loss %+v, errors %v",
			res.Checked, res.Offline, res.Loss, res.Errors)
	}
}

// Interrupted (Ctrl-C) while the offline members log in: chatbench must
// stop cleanly, not panic.
func TestAnInterruptedOfflineCheckFailsWithoutPanicking(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/dev/token":
			fmt.Fprint(w, `{"token":"t"}`)
		default: // the WebSocket dial of the first member: the user presses Ctrl-C
			cancel()
			http.Error(w, "no", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	b := offlineBench(srv.URL)
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("offlineCheck panicked after an interrupt: %v", p)
		}
	}()
	b.offlineCheck(ctx, newAPI(srv.URL, "admin", 1), b.offlineCount())
}
