package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
)

// TestAnalyticsRejoinedMember: a member removed and added back has read
// (or received) a message of their first stretch only by a receipt (or
// ack) of that stretch. alice sends 0 to 3; bob reads 0, is removed after
// 1 is sent, before reading it, is added back after 2 and reads 3. His
// pulls after the rejoin start after 2, so he never received 1, and his
// cursor at 3 must not count it.
func TestAnalyticsRejoinedMember(t *testing.T) {
	c := testClickHouse(t)
	ctx := t.Context()
	start := time.Date(2024, 2, 10, 12, 0, 0, 0, time.UTC)
	at := func(s int64) int64 { return start.UnixMilli() + s*1000 }
	d := &analyticsData{msgs: map[int32][]schema.Message{}}
	for i := range int64(4) {
		d.msgs[0] = append(d.msgs[0], schema.Message{Gid: "g", Sender: "alice", ClientMsgID: fmt.Sprint(i),
			SentAt: at(2 * i), Body: []byte("hi"), MsgID: i})
	}
	for i, ev := range []schema.Member{
		{Gid: "g", Uid: "alice", Op: schema.OpJoin, Pos: -1, At: at(-1)},
		{Gid: "g", Uid: "bob", Op: schema.OpJoin, Pos: -1, At: at(-1)},
		{Gid: "g", Uid: "bob", Op: schema.OpLeave, Pos: 1, HasJoined: true, Joined: -1, At: at(3)},
		{Gid: "g", Uid: "bob", Op: schema.OpJoin, Pos: 2, At: at(5)},
	} {
		d.history = append(d.history, MemberRow{ev, 0, int64(i)})
	}
	d.members = d.history
	d.acks = []AckRow{
		{schema.Ack{Gid: "g", Uid: "bob", Upto: 0, At: at(1)}, 0, 0},
		{schema.Ack{Gid: "g", Uid: "bob", Upto: 3, At: at(7)}, 0, 1},
	}
	d.receipts = []ReceiptRow{
		{schema.Receipt{Gid: "g", Uid: "bob", Upto: 0, At: at(1)}, 0, 0},
		{schema.Receipt{Gid: "g", Uid: "bob", Upto: 3, At: at(8)}, 0, 1},
	}
	if err := c.InsertMessages(ctx, 0, d.msgs[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.InsertMembers(ctx, d.members); err != nil {
		t.Fatal(err)
	}
	for i := range d.acks { // one insert each: two rows of read_cursors
		if err := c.InsertAcks(ctx, d.acks[i:i+1]); err != nil {
			t.Fatal(err)
		}
		if err := c.InsertReceipts(ctx, d.receipts[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	tr := d.truth()
	queries := loadCookbook(t)
	check := func(what string, got, recomputed, want [][]any) {
		t.Helper()
		if !sameRows(got, want) {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
		if !sameRows(recomputed, want) {
			t.Errorf("%s recomputed: %v, want %v", what, recomputed, want)
		}
	}

	readCounts := func() [][]any {
		return queries["read_counts"].run(t, c, map[string]any{"gid": "g", "from_msgid": int64(0), "to_msgid": int64(3)})
	}
	// 1 is bob's (a member when it was sent) and unread; 2 is no one's.
	check("read_counts", readCounts(), tr.readCounts("g", 0, 3),
		[][]any{{int64(0), "alice", int64(1), int64(1)}, {int64(1), "alice", int64(1), int64(0)},
			{int64(2), "alice", int64(0), int64(0)}, {int64(3), "alice", int64(1), int64(1)}})
	for _, m := range d.msgs[0] {
		var want [][]any
		if m.MsgID == 1 {
			want = [][]any{{"bob"}}
		}
		got := queries["unread_members"].run(t, c, map[string]any{"gid": "g", "msgid": m.MsgID})
		check(fmt.Sprintf("unread_members(%d)", m.MsgID), got, tr.unread(m), want)
	}
	// Read: 0 after 1 s, 3 after 2 s; delivered: 0 and 3 after 1 s each.
	from, to := time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	window := map[string]any{"from": from, "to": to}
	check("time_to_read", queries["time_to_read"].run(t, c, window), tr.latencies(tr.receipts)(from, to),
		[][]any{{"g", int64(2), int64(2000), int64(2000), int64(2000), int64(1000), int64(2000)}})
	check("delivery_latency", queries["delivery_latency"].run(t, c, window), tr.latencies(tr.acks)(from, to),
		[][]any{{"g", int64(2), int64(1000), int64(1000), int64(1000), int64(1000), int64(1000)}})

	// Dropping the receipts keeps the read of 3, of the current stretch
	// (read_cursors holds it), and loses the read of 0, of the stretch
	// before, which once read_cursors is merged receipt_events alone held.
	if _, err := c.DropEventsBefore(ctx, to); err != nil {
		t.Fatal(err)
	}
	if err := c.conn.Exec(ctx, "OPTIMIZE TABLE read_cursors FINAL"); err != nil {
		t.Fatal(err)
	}
	if got, want := readCounts(), [][]any{{int64(0), "alice", int64(1), int64(0)}, {int64(1), "alice", int64(1), int64(0)},
		{int64(2), "alice", int64(0), int64(0)}, {int64(3), "alice", int64(1), int64(1)}}; !sameRows(got, want) {
		t.Errorf("read_counts after dropping the receipts: got %v, want %v", got, want)
	}
}
