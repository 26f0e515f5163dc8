package gateway

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/topics"
)

// entries is a cursors frame's list: each gid up to upto.
func entries(upto int64, gids ...string) []map[string]any {
	out := make([]map[string]any, len(gids))
	for i, gid := range gids {
		out[i] = map[string]any{"gid": gid, "upto": upto}
	}
	return out
}

// teams names team-lo to team-<hi-1>, the groups of memberOf.
func teams(lo, hi int) []string {
	var gids []string
	for i := lo; i < hi; i++ {
		gids = append(gids, fmt.Sprint("team-", i))
	}
	return gids
}

// A user with new messages in hundreds of groups acks and marks them read
// in one frame: one ack frame a group, at the frame rate (200 a second),
// had a user in more than 100 groups with a message each second ack late.
// Each entry is judged as its one-group frame would be: a group the user
// is not in, a read past the group's newest message and one past the
// user's leave are refused with their codes, in the answer, and nothing is
// written for them; every other entry is written, once.
func TestACursorsFrameMovesTheCursorsOfManyGroups(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.memberOf(300, "alice")
	e.group("theirs", "bob")
	e.group("gone", "alice", "bob")
	alice, bob := e.login(0, "alice"), e.login(0, "bob")
	sendHi(t, alice, "gone", "a1")
	e.removeMember("gone", "alice")
	after := sendHi(t, bob, "gone", "b1")

	acksBefore, readsBefore := e.topicEndsOf(topics.Acks), e.topicEndsOf(topics.Receipts)
	acks := append(entries(2, teams(0, 300)...), entries(0, "theirs")...)
	reads := append(entries(2, teams(0, 99)...), entries(50, "team-99")...)
	reads = append(reads, entries(after, "gone")...)
	f := alice.call(map[string]any{"op": "cursors", "acks": acks, "reads": reads})
	if f["op"] != protocol.OpOK {
		t.Fatalf("a cursors frame of %d acks and %d reads: %.300v", len(acks), len(reads), f)
	}
	var refused []string
	for _, r := range f["refused"].([]any) {
		r := r.(map[string]any)
		refused = append(refused, fmt.Sprint(r["op"], " ", r["gid"], " ", r["code"]))
		if r["message"] == "" {
			t.Errorf("refusal %v says nothing", r)
		}
	}
	slices.Sort(refused)
	want := []string{"ack theirs not_member", "read gone left_group", "read team-99 beyond_head"}
	if !slices.Equal(refused, want) {
		t.Errorf("refused %q, want %q", refused, want)
	}
	waitFor(t, "every ack and read taken projected", 20*time.Second, func() bool {
		for i, gid := range teams(0, 300) {
			st, err := e.redis.CursorState(context.Background(), gid, "alice", nil)
			if err != nil || st.Ack != 2 || i < 99 && st.Read != 2 {
				return false
			}
		}
		return true
	})
	if st, _ := e.redis.CursorState(context.Background(), "team-99", "alice", nil); st.Read != -1 {
		t.Errorf("team-99's read cursor is %d after a refused read; want -1", st.Read)
	}
	if n := e.topicEndsOf(topics.Acks) - acksBefore; n != 300 {
		t.Errorf("%d records written to %s for 300 acks taken of 301", n, topics.Acks)
	}
	if n := e.topicEndsOf(topics.Receipts) - readsBefore; n != 99 {
		t.Errorf("%d records written to %s for 99 reads taken of 101", n, topics.Receipts)
	}
	// Again: below or at the cursors, nothing more is written.
	if f := alice.call(map[string]any{"op": "cursors", "acks": entries(2, teams(0, 300)...)}); f["op"] != protocol.OpOK || f["refused"] != nil {
		t.Fatalf("the same acks again: %.300v", f)
	}
	if n := e.topicEndsOf(topics.Acks) - acksBefore; n != 300 {
		t.Errorf("acks at the cursors wrote %d records more", n-300)
	}
}

// A cursors frame costs one frame of the connection's rate more per 100
// entries, as a sync does per 100 groups it lists: each entry is a look
// at Redis and a record, and at one frame whatever its entries a
// connection could have the gateway write 500 records 200 times a second.
func TestACursorsFrameIsChargedByItsEntries(t *testing.T) {
	// 100 frames a second, bursts of 40.
	e := newEnv(t, envOpts{tune: func(c *Config) { c.SendRate, c.SendBurst = 1, 10 }})
	e.memberOf(protocol.MaxCursors, "alice")
	r := e.login(0, "alice")
	answered, limited := 0, 0
	for i := range 20 {
		id := fmt.Sprint("c", i)
		r.send(map[string]any{"op": "cursors", "id": id, "acks": entries(2, teams(0, protocol.MaxCursors)...)})
		switch f := r.answerOf(id); {
		case f["op"] == protocol.OpOK && f["refused"] == nil:
			answered++
		case f["code"] == string(protocol.CodeRateLimited):
			limited++
		default:
			t.Fatalf("cursors %d: %.200v", i, f)
		}
	}
	// 6 frames each: 40 of burst pay for 7, and 20 in a row come faster
	// than 100 frames a second pay for the rest.
	if limited < 5 || answered == 0 {
		t.Errorf("20 cursors frames of %d entries each in a row with 40 frames of burst: %d answered, %d refused as rate_limited; want most refused", protocol.MaxCursors, answered, limited)
	}
}

// A cursors frame past the limit, or one naming a group twice in a list,
// is refused whole, and writes nothing.
func TestACursorsFrameOverTheLimitIsRefusedWhole(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.memberOf(3, "alice")
	r := e.login(0, "alice")
	before := e.topicEndsOf(topics.Acks, topics.Receipts)
	many := make([]map[string]any, protocol.MaxCursors+1)
	for i := range many {
		many[i] = map[string]any{"gid": "team-0", "upto": 2}
	}
	for name, req := range map[string]map[string]any{
		"past the limit": {"op": "cursors", "acks": many[:protocol.MaxCursors/2+1], "reads": many[:protocol.MaxCursors/2]},
		"a gid twice":    {"op": "cursors", "acks": entries(2, "team-0", "team-1", "team-0")},
		"none":           {"op": "cursors"},
		"a bad upto":     {"op": "cursors", "reads": entries(-2, "team-0")},
	} {
		if f := r.call(req); code(f) != string(protocol.CodeInvalid) {
			t.Errorf("%s: %.200v, want invalid", name, f)
		}
	}
	if n := e.topicEndsOf(topics.Acks, topics.Receipts) - before; n != 0 {
		t.Errorf("refused frames wrote %d records", n)
	}
}

// Over HTTP, POST /v1/cursors takes the same entries and answers the same.
func TestCursorsOverHTTP(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.memberOf(2, "alice")
	st, out := e.http("POST", "/v1/cursors", e.token("alice"), map[string]any{
		"acks": entries(2, "team-0", "team-1", "nobodys"), "reads": entries(2, "team-0")})
	if st != 200 || out["op"] != protocol.OpOK {
		t.Fatalf("POST /v1/cursors: %d %v", st, out)
	}
	refused, _ := out["refused"].([]any)
	if len(refused) != 1 || refused[0].(map[string]any)["gid"] != "nobodys" || refused[0].(map[string]any)["code"] != string(protocol.CodeNotMember) {
		t.Fatalf("refused %v, want the ack of nobodys as not_member", out["refused"])
	}
	waitFor(t, "the acks and the read projected", 20*time.Second, func() bool {
		a, _ := e.redis.CursorState(context.Background(), "team-0", "alice", nil)
		b, _ := e.redis.CursorState(context.Background(), "team-1", "alice", nil)
		return a.Ack == 2 && a.Read == 2 && b.Ack == 2
	})
}
