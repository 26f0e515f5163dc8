package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// holdMessageProduce holds the next produce request to chat.messages until
// the returned release is called; held is closed once it is being held.
func holdMessageProduce(e *env) (held chan struct{}, release func()) {
	c := e.broker.Cluster()
	held = make(chan struct{})
	rel := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic != topics.Messages {
				continue
			}
			first := false
			once.Do(func() { first = true })
			if first {
				close(held)
				c.SleepControl(func() { <-rel })
			}
		}
		return nil, nil, false
	})
	var ronce sync.Once
	return held, func() { ronce.Do(func() { close(rel) }) }
}

// A client of the HTTP API that goes away while its send is being
// produced (its request's context ends) resends with the same cmid: the
// record was written after all, so the resend is answered with its msgid
// and writes nothing. (Over WebSocket a connection's context ends only
// after the requests in flight on it return.)
func TestAnHTTPSendWhoseClientWentAwayIsResentOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	e.parts["persister"].stop() // the persister lags behind (as under load)
	held, release := holdMessageProduce(e)
	defer release()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", e.gws[0].srv.URL+"/v1/groups/g1/messages",
			strings.NewReader(`{"cmid":"c1","body":"hi"}`))
		req.Header.Set("Authorization", "Bearer "+e.token("alice"))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the send's produce never reached the broker")
	}
	cancel() // the client goes away mid-send
	<-done
	time.Sleep(500 * time.Millisecond)
	release() // the record is written after all
	waitFor(t, "the first record", 10*time.Second, func() bool { return e.topicEndsOf(topics.Messages) >= 1 })

	st, f := e.http("POST", "/v1/groups/g1/messages", e.token("alice"), map[string]any{"cmid": "c1", "body": "hi"})
	n := e.topicEndsOf(topics.Messages)
	t.Logf("resend answered %d %v; chat.messages holds %d records", st, f, n)
	if f["op"] != "accepted" {
		t.Fatalf("resend: %d %v", st, f)
	}
	if n != 1 || f["msgid"] != float64(0) {
		t.Fatalf("resend after a disconnect mid-send: %d records written and answered msgid %v; want 1 record, answered with its msgid 0", n, f["msgid"])
	}
}

// A member added back, whose join is written but not yet projected, acks
// a message sent after the join (the fan-out, which reads chat.members
// itself, pushed it to them). The send path answers unavailable then
// (retry); an ack must not be told left_group, which clients give up on.
func TestAnAckOfAMemberBeingAddedBackIsNotLeftGroup(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	e.removeMember("g1", "alice")
	// Projected, not only noted: a leave the projector has yet to apply
	// would be undone by the add's clearing of its note.
	e.waitProjected(consumers.GroupMemberProjector, topics.Members, "g1")
	e.parts["members"].stop() // the member projector lags behind
	if st, out := e.http("POST", "/v1/admin/groups/g1/members", adminToken, map[string]any{"uid": "alice"}); st != 200 {
		t.Fatalf("add alice back: %d %v", st, out)
	}
	st, f := e.http("POST", "/v1/groups/g1/messages", e.token("bob"), map[string]any{"cmid": "b1", "body": "welcome back"})
	if f["op"] != "accepted" {
		t.Fatalf("bob's send: %d %v", st, f)
	}
	msgid := int64(f["msgid"].(float64))
	_, send := e.http("POST", "/v1/groups/g1/messages", e.token("alice"), map[string]any{"cmid": "a1", "body": "hi"})
	for _, op := range []string{"ack", "read"} {
		st, f = e.http("POST", "/v1/groups/g1/"+op, e.token("alice"), map[string]any{"upto": msgid})
		t.Logf("%s upto %d while alice's join is being applied: %d %v (a send: %v)", op, msgid, st, f, send)
		if code(f) == string(protocol.CodeLeft) {
			t.Errorf("%s of a member being added back: %d %v, want ok or unavailable, as a send gets (%v)", op, st, f, code(send))
		}
	}
}

// A removal waits for the member's sends in flight and refuses new ones
// before it reads the group's head for the leave: a send claimed before
// the removal lies at or before the leave (its sender can pull it, no one
// sees a message from one who had left), and one after it is refused with
// unavailable, which the client retries until it learns it has left.
func TestARemovalWaitsForTheMembersSendsInFlight(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob")
	held, release := holdMessageProduce(e)
	defer release()

	sent := make(chan map[string]any, 1)
	go func() {
		_, f := e.http("POST", "/v1/groups/g1/messages", e.token("alice"), map[string]any{"cmid": "c1", "body": "last words"})
		sent <- f
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the send's produce never reached the broker")
	}
	members := e.topicEndsOf(topics.Members)
	removed := make(chan error, 1)
	go func() {
		st, out := e.http("DELETE", "/v1/admin/groups/g1/members/alice", adminToken, nil)
		if st != 200 {
			removed <- fmt.Errorf("removal answered %d %v", st, out)
			return
		}
		removed <- nil
	}()
	waitFor(t, "the removal's leaving record", 10*time.Second, func() bool { return e.topicEndsOf(topics.Members) > members })

	st, f := e.http("POST", "/v1/groups/g1/messages", e.token("alice"), map[string]any{"cmid": "c2", "body": "too late"})
	if st != 503 || f["code"] != "unavailable" || !strings.Contains(fmt.Sprint(f["message"]), "being removed") {
		t.Errorf("a send during the removal answered %d %v; want 503 unavailable, being removed", st, f)
	}
	// A second removal meanwhile (the admin's retry) waits for the first:
	// two at once could end a stretch joined again between their leaves.
	if st, out := e.http("DELETE", "/v1/admin/groups/g1/members/alice", adminToken, nil); st != 503 ||
		!strings.Contains(fmt.Sprint(out["message"]), "being removed from g1 by another call") {
		t.Errorf("a second removal during the first answered %d %v; want 503, being removed by another call", st, out)
	}
	select {
	case err := <-removed:
		t.Fatalf("the removal finished while the member's send was in flight (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}

	release()
	f = <-sent
	if f["op"] != "accepted" {
		t.Fatalf("the send in flight answered %v", f)
	}
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	leave := e.lastMemberEvent("g1", "alice")
	if msgid := int64(f["msgid"].(float64)); leave.Op != schema.OpLeave || leave.Pos < msgid {
		t.Fatalf("alice's last member record: %+v; want a leave at or after her message %d", leave, msgid)
	}
	if n := e.topicEndsOf(topics.Messages); n != 1 {
		t.Errorf("chat.messages holds %d records, want the one sent before the removal", n)
	}
}

// A member removed while they and others keep sending: every message of
// theirs that was accepted lies at or before their leave, and they are
// handed nothing past it, by push or by pull; the others get everything.
func TestARemovalUnderLoadKeepsTheLeaverBeforeTheirLeave(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.group("g1", "alice", "bob", "carol")
	alice, bob, carol := e.connect(0, "alice", nil), e.connect(0, "bob", nil), e.connect(0, "carol", nil)
	e.online(0, "alice", "bob", "carol")

	var mu sync.Mutex
	accepted := map[string][]int64{}
	stop := testserver.Load(8, func(w, i int) { // four senders each
		m := []*member{alice, bob}[w%2]
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		id, err := m.c.Send(ctx, "g1", fmt.Sprint(m.uid, " ", w, " ", i))
		cancel()
		if err == nil {
			mu.Lock()
			accepted[m.uid] = append(accepted[m.uid], id)
			mu.Unlock()
		}
	})
	time.Sleep(500 * time.Millisecond)
	e.removeMember("g1", "alice")
	time.Sleep(500 * time.Millisecond)
	stop()

	leave := e.lastMemberEvent("g1", "alice")
	if leave.Op != schema.OpLeave {
		t.Fatalf("alice's last member record: %+v, want her leave", leave)
	}
	mu.Lock()
	defer mu.Unlock()
	var after int
	for _, id := range accepted["bob"] {
		if id > leave.Pos {
			after++
		}
	}
	if len(accepted["alice"]) == 0 || after == 0 {
		t.Fatalf("alice had %d sends accepted, bob %d after her leave at %d: the test no longer sends across the removal", len(accepted["alice"]), after, leave.Pos)
	}
	for _, id := range accepted["alice"] {
		if id > leave.Pos {
			t.Errorf("alice's message %d was accepted past her leave at %d", id, leave.Pos)
		}
	}
	last := slices.Max(accepted["bob"])
	waitFor(t, "carol to get bob's last message", 10*time.Second, func() bool { return slices.Contains(carol.delivered("g1"), last) })
	time.Sleep(300 * time.Millisecond) // anything still on its way to alice
	for _, id := range alice.delivered("g1") {
		if id > leave.Pos {
			t.Errorf("alice was handed message %d, past her leave at %d", id, leave.Pos)
		}
	}
	if n, want := len(carol.delivered("g1")), len(accepted["alice"])+len(accepted["bob"]); n != want {
		t.Errorf("carol got %d messages, want the %d accepted", n, want)
	}
}
