package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// The loss check must compare what came at an accepted msgid with the send
// accepted under it, not only the msgid.
func TestTheLossCheckComparesBodiesNotOnlyMsgids(t *testing.T) {
	for _, c := range []struct {
		name     string
		accepted []sendRef
	}{
		// Send 0 was accepted as msgid 10; the member got another send's
		// body at 10 (send 1, whose own answer a client timeout lost, so
		// it is not among the accepted). Send 0's body never came.
		{"the other send not accepted", []sendRef{{msgid: 10, k: 0}}},
		// The same with send 1 accepted as 11: send 0 is still lost.
		{"the other send accepted too", []sendRef{{msgid: 10, k: 0}, {msgid: 11, k: 1}}},
	} {
		var l lossCheck
		l.checkOne("g", "u", groupLog{accepted: c.accepted}, []sendRef{{msgid: 10, k: 1, gen: 1}})
		l.verdict()
		if l.OK || l.Mismatched != 1 || l.Missing != 1 {
			t.Errorf("%s: send 0's body never reached the member, yet the check says %+v", c.name, l)
		}
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

// A member handed a message of a group it is not in (a push routed to a
// non-member) saw what it must not: the check must fail (the offline
// check counts the same way).
func TestTheLossCheckFailsOnAMessageOfAnotherGroup(t *testing.T) {
	// Users 0 and 1 are in g0, users 1 and 2 in g1; one message each.
	p := &plan{uids: []string{"bx-u0", "bx-u1", "bx-u2"}, gids: []string{"bx-g0", "bx-g1"},
		members: [][]int{{0, 1}, {1, 2}}, groupsOf: [][]int{{0}, {0, 1}, {1}}, online: []int{0, 1, 2}}
	b := &bench{cfg: &Config{Prefix: "bx"}, plan: p, accepted: [][]sendRef{{{msgid: 10, k: 0}}, {{msgid: 11, k: 1}}}}
	for u := range p.uids {
		m := &member{idx: u, user: u, got: map[string][]sendRef{}}
		for _, g := range p.groupsOf[u] {
			m.got[p.gids[g]] = append(m.got[p.gids[g]], sendRef{b.accepted[g][0].msgid, b.accepted[g][0].k, 1})
		}
		b.members = append(b.members, m)
	}
	if l := b.check(); !l.OK {
		t.Fatalf("every member got its groups' messages once, yet the check says %+v", l)
	}
	// User 0 is handed g1's message too.
	b.members[0].got["bx-g1"] = []sendRef{{11, 1, 1}}
	if l := b.check(); l.OK || l.NotMember != 1 {
		t.Fatalf("user 0 was handed a message of bx-g1, which it is not in, yet the check says %+v", l)
	}
}

// After churn a member's new client hands over again what the old one had
// not acked, so the member's count of messages reaches the accepted sends
// while a push is still on its way. The wait for the pushes must not end
// there: the push that comes next would count as late (a step judged too
// slow) and as missing before the final pulls.
func TestWaitingForThePushesLooksPastRedeliveries(t *testing.T) {
	p := &plan{uids: []string{"bx-u0"}, gids: []string{"bx-g0"}, members: [][]int{{0}}, groupsOf: [][]int{{0}}, online: []int{0}}
	m := &member{user: 0, got: map[string][]sendRef{"bx-g0": {{10, 0, 1}, {10, 0, 2}}}}
	m.n.Store(2)
	b := &bench{cfg: &Config{Prefix: "bx"}, plan: p, members: []*member{m}, accepted: [][]sendRef{{{10, 0, 0}, {11, 1, 0}}}}
	go func() {
		time.Sleep(300 * time.Millisecond) // the push of 11 arrives
		m.mu.Lock()
		m.got["bx-g0"] = append(m.got["bx-g0"], sendRef{11, 1, 2})
		m.mu.Unlock()
		m.n.Add(1)
	}()
	t0 := time.Now()
	b.waitDelivered(context.Background(), time.Now().Add(5*time.Second), 2*time.Second)
	if l := b.check(); l.Missing != 0 {
		t.Fatalf("the wait for the pushes ended after %v with message 11 still on its way: %+v", time.Since(t0), l)
	}
}

// The report says how many offline members "logged in after the run and
// pulled": one whose login failed is not among them.
func TestTheOfflineCheckCountsOnlyTheMembersWhoLoggedIn(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/dev/token" {
			fmt.Fprint(w, `{"token":"t"}`)
			return
		}
		http.Error(w, "unavailable", http.StatusServiceUnavailable) // every WebSocket dial fails
	}))
	defer srv.Close()
	b := offlineBench(srv.URL)
	res := b.offlineCheck(context.Background(), newAPI(srv.URL, "admin", 1), b.offlineCount())
	if res.Checked != 0 || res.Offline != 3 || res.Loss.OK {
		t.Fatalf("no offline member could log in, yet the report says %d of %d logged in and pulled (loss OK %v, errors %v)",
			res.Checked, res.Offline, res.Loss.OK, res.Errors)
	}
}

// The accepted msgid came, but with a body chatbench cannot read (cut,
// garbled, or another run's): the send's own body never reached the
// member, so the check must not count it as handed over.
func TestTheLossCheckFailsOnAGarbledBodyUnderAnAcceptedMsgid(t *testing.T) {
	b := &bench{cfg: &Config{Prefix: "bx", BodySize: 64}}
	sent := time.Unix(1700000000, 0)
	whole := b.body(sent, 0)
	for _, body := range []string{"bx.1700000000000000000.", "xxxx", whole[:20], whole[:60], whole[:60] + "yyyy"} {
		_, k, _ := b.parseBody(body)
		var l lossCheck
		l.checkOne("g", "u", groupLog{accepted: []sendRef{{msgid: 10, k: 0}}}, []sendRef{{msgid: 10, k: k, gen: 1}})
		l.verdict()
		if l.OK || l.Missing != 1 {
			t.Errorf("send 0 was accepted as msgid 10 and msgid 10 came with body %q; the check says %+v", body, l)
		}
	}
}

// A member's clients after churn are one user's view of the group: what a
// new client hands over for the first time must come after everything the
// member's earlier clients were handed. Only what the old client had not
// acked may come again.
func TestTheLossCheckFailsOnOrderAcrossAMembersClients(t *testing.T) {
	accepted := []sendRef{{10, 0, 0}, {11, 1, 0}, {12, 2, 0}}
	for _, c := range []struct {
		name string
		got  []sendRef
	}{
		// Client 1 was handed 10 and 12, client 2 then 11.
		{"the skipped message alone", []sendRef{{10, 0, 1}, {12, 2, 1}, {11, 1, 2}}},
		// Client 2 starts at the ack cursor, 10: 11 comes first, then 12 again.
		{"the skipped message and a redelivery", []sendRef{{10, 0, 1}, {12, 2, 1}, {11, 1, 2}, {12, 2, 2}}},
		// The final pull of a member back from churn hands over 10, which
		// client 1 skipped.
		{"the final pull on a new client", []sendRef{{11, 1, 1}, {12, 2, 1}, {10, 0, 2}}},
	} {
		var l lossCheck
		l.checkOne("bx-g0", "bx-u0", groupLog{accepted: accepted}, c.got)
		l.verdict()
		if l.OK || l.OutOfOrder != 1 {
			t.Errorf("%s: the member saw a message after a later one (%v), yet the check says %+v", c.name, c.got, l)
		}
	}
}

// A message a member's next client hands again (churn) is the same
// message: under its msgid must come the same body as the first time.
func TestTheLossCheckFailsOnARedeliveryWithAnotherBody(t *testing.T) {
	accepted := []sendRef{{10, 0, 0}, {11, 1, 0}}
	for _, k := range []int32{0, 7, -1} { // send 0's body, a send's that failed on its client, a garbled one
		var l lossCheck
		l.checkOne("bx-g0", "bx-u0", groupLog{accepted: accepted}, []sendRef{{10, 0, 1}, {11, 1, 1}, {11, k, 2}})
		l.verdict()
		if l.OK || l.Altered != 1 {
			t.Errorf("msgid 11 came with send 1's body, then again with send %d's, yet the check says %+v", k, l)
		}
	}
}

// strayBench is a bench with groups bx-g0 (users 0 and 1) and bx-g1
// (users 1 and 2): send 0 accepted in g0 as msgid 10, send 1 in g1 as 11,
// send 2 made to g0 but failed on its client (a timeout: it may have got
// in). Every member was handed its groups' accepted sends.
func strayBench() *bench {
	p := &plan{uids: []string{"bx-u0", "bx-u1", "bx-u2"}, gids: []string{"bx-g0", "bx-g1"},
		members: [][]int{{0, 1}, {1, 2}}, groupsOf: [][]int{{0}, {0, 1}, {1}}, online: []int{0, 1, 2}}
	b := &bench{cfg: &Config{Prefix: "bx"}, plan: p, accepted: [][]sendRef{{{10, 0, 0}}, {{11, 1, 0}}},
		failedSends: []map[int32]bool{{2: true}, {}}}
	for u := range p.uids {
		m := &member{idx: u, user: u, got: map[string][]sendRef{}}
		for _, g := range p.groupsOf[u] {
			m.got[p.gids[g]] = append(m.got[p.gids[g]], sendRef{b.accepted[g][0].msgid, b.accepted[g][0].k, 1})
		}
		b.members = append(b.members, m)
	}
	return b
}

// A msgid no accepted send returned may only be a send made to its group
// that failed on its client yet got in. Anything else under it is a
// message the group never had.
func TestTheLossCheckFailsOnAStrayMessage(t *testing.T) {
	b := strayBench()
	// Send 2 got in as msgid 12, and both members of g0 were handed it.
	for _, m := range b.members[:2] {
		m.got["bx-g0"] = append(m.got["bx-g0"], sendRef{12, 2, 1})
	}
	if l := b.check(); !l.OK || l.Unexpected != 2 {
		t.Fatalf("a send that failed on its client got in and reached every member, yet the check says %+v", l)
	}
	for _, c := range []struct {
		name string
		k    int32
	}{
		{"send 1, accepted in bx-g1", 1},
		{"send 3, never made", 3},
		{"a garbled body", -1},
	} {
		b := strayBench()
		for _, m := range b.members[:2] {
			m.got["bx-g0"] = append(m.got["bx-g0"], sendRef{12, c.k, 1})
		}
		if l := b.check(); l.OK || l.Stray != 2 {
			t.Errorf("both members of bx-g0 were handed msgid 12 with %s, yet the check says %+v", c.name, l)
		}
	}
}

// A send that failed on its client yet got in is a message of its group
// like any other: each member must be handed it, with the same body.
func TestTheLossCheckFailsWhenASendThatFailedReachedOnlySomeMembers(t *testing.T) {
	b := strayBench()
	b.members[0].got["bx-g0"] = append(b.members[0].got["bx-g0"], sendRef{12, 2, 1})
	l := b.check()
	if l.OK || l.MissingUnconfirmed != 1 || len(l.incomplete) != 1 || l.incomplete[0] != (slot{1, 0}) {
		t.Fatalf("send 2 got in as msgid 12 and reached user 0 but not user 1, yet the check says %+v", l)
	}
	// User 1 was handed msgid 12 too, but with another body.
	b.members[1].got["bx-g0"] = append(b.members[1].got["bx-g0"], sendRef{12, 5, 1})
	b.failedSends[0][5] = true
	if l := b.check(); l.OK || l.Mismatched != 1 {
		t.Fatalf("msgid 12 came to user 0 as send 2 and to user 1 as send 5, yet the check says %+v", l)
	}
}

// A send that failed on its client yet got in, which the offline members
// pulled but no online member was handed, is a message the online members
// lost; one that only some offline members pulled, the others lost. Both
// fail the offline check, with a fault line.
func TestTheOfflineCheckFailsWhenASendThatFailedReachedOnlyOfflineMembers(t *testing.T) {
	for _, c := range []struct {
		name   string
		pulled []string // the offline members handed send 2 as msgid 2
	}{
		{"every offline member", []string{"bx-u1", "bx-u2", "bx-u3"}},
		{"one offline member", []string{"bx-u1"}},
	} {
		var b *bench
		history := map[string]map[string][]protocol.Message{}
		msg := func(id int64, k int) protocol.Message {
			return protocol.Message{Gid: "bx-g0", MsgID: id, Sender: "bx-u0", SentAt: 1, Body: b.body(time.Unix(0, 1), k)}
		}
		srv := historyGateway(t, history)
		b = offlineBench(srv.URL)
		b.failedSends = []map[int32]bool{{2: true}}
		b.members = []*member{b.byUser[0]}
		b.byUser[0].got["bx-g0"] = []sendRef{{0, 0, 1}, {1, 1, 1}}
		for _, uid := range []string{"bx-u1", "bx-u2", "bx-u3"} {
			history[uid] = map[string][]protocol.Message{"bx-g0": {msg(0, 0), msg(1, 1)}}
		}
		for _, uid := range c.pulled {
			history[uid]["bx-g0"] = append(history[uid]["bx-g0"], msg(2, 2))
		}
		res := b.offlineCheck(context.Background(), newAPI(srv.URL, "admin", 1), b.offlineCount())
		if res.Checked != 3 {
			t.Fatalf("%s: %d offline members checked (errors %v), want 3", c.name, res.Checked, res.Errors)
		}
		if res.Loss.OK || res.Loss.MissingUnconfirmed == 0 || !slices.ContainsFunc(res.Loss.Faults, func(f string) bool { return strings.Contains(f, "msgid 2") }) {
			t.Errorf("%s: send 2 failed on its client, got in as msgid 2 and was pulled by %v, but not by the others, yet the offline check says %+v",
				c.name, c.pulled, res.Loss)
		}
	}
}
