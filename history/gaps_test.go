package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

func gapMsgs(gid string, ids ...int64) []schema.Message {
	out := make([]schema.Message, len(ids))
	for i, id := range ids {
		out[i] = schema.Message{Gid: gid, Sender: "u", ClientMsgID: fmt.Sprint("c", id), SentAt: 1, Body: []byte("x"), MsgID: id}
	}
	return out
}

// thirty stores messages 0..29 of group g in a window of 10 (floor 19)
// and the messages inCH in ClickHouse, and returns a History over both.
func thirty(t *testing.T, inCH ...int64) (*fixture, *History) {
	t.Helper()
	f := newFixture(t, 10, true)
	var all []int64
	for i := int64(0); i < 30; i++ {
		all = append(all, i)
	}
	if err := f.ch.InsertMessages(context.Background(), 0, gapMsgs("g", inCH...)); err != nil {
		t.Fatal(err)
	}
	if err := f.redis.AppendWindow(context.Background(), nil, gapMsgs("g", all...)); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Redis: f.redis, ClickHouse: f.ch})
	if err != nil {
		t.Fatal(err)
	}
	return f, h
}

func span(from, to int64) []int64 {
	var ids []int64
	for i := from; i <= to; i++ {
		ids = append(ids, i)
	}
	return ids
}

// ClickHouse attached late (a deployment that ran Redis-only, or CH
// restored from an old backup): it holds only the newest messages. The
// window still holds messages ClickHouse lacks. A pull from the start must
// not silently jump over them.
func TestPullRefusesToJumpOverWhatClickHouseLacks(t *testing.T) {
	ctx := context.Background()
	_, h := thirty(t, span(25, 29)...) // window: 20..29 (floor 19); ClickHouse: only 25..29
	p, err := h.Pull(ctx, "g", 19, 5)  // the first page above the floor
	if err != nil {
		t.Fatal(err)
	}
	if p.Messages[0].MsgID != 20 {
		t.Fatalf("Pull(after 19) = %d.., want 20.. from the window", p.Messages[0].MsgID)
	}
	p, err = h.Pull(ctx, "g", -1, 5)
	if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "lacks 19") {
		t.Fatalf("Pull(after -1) = %v (source %s), %v: want ErrIncomplete naming 19, not a page that jumps over 0..24",
			msgIDs(p.Messages), p.Source, err)
	}
}

// Scrolling up over a ClickHouse that lacks 10..24: the page before 24 is
// 20..23, from the window, and the page below the window is refused.
func TestPullBeforeServesTheWindowAboveAClickHouseGap(t *testing.T) {
	ctx := context.Background()
	// ClickHouse holds 0..9 (an old backfill) and 25..29, not 10..24.
	_, h := thirty(t, append(span(0, 9), span(25, 29)...)...)
	p, err := h.PullBefore(ctx, "g", -1, 24, 5) // window holds 20..23
	if err != nil {
		t.Fatal(err)
	}
	if got := msgIDs(p.Messages); fmt.Sprint(got) != "[20 21 22 23]" || !p.More {
		t.Fatalf("PullBefore(before 24, limit 5) = %v (source %s, more %v), want 20..23 from the window, with more", got, p.Source, p.More)
	}
	// Below the window ClickHouse must hold the floor, 19: it does not.
	if p, err := h.PullBefore(ctx, "g", -1, 20, 5); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("PullBefore(before 20) = %v, %v; want ErrIncomplete", msgIDs(p.Messages), err)
	}
}

// The page before 25 (limit 5) is 20..24, all in the window, and older
// messages certainly exist (the floor, 19, is one). It must not need
// ClickHouse.
func TestPagesInTheWindowNeedNoClickHouse(t *testing.T) {
	ctx := context.Background()
	f, h := thirty(t, span(0, 29)...)
	f.ch.Close() // ClickHouse down
	if p, err := h.Pull(ctx, "g", 19, 5); err != nil || len(p.Messages) != 5 {
		t.Fatalf("Pull inside the window with ClickHouse down: %v", err)
	}
	p, err := h.PullBefore(ctx, "g", -1, 25, 5)
	if err != nil {
		t.Fatalf("PullBefore(before 25, limit 5), every message of the page in the window, ClickHouse down: %v", err)
	}
	if len(p.Messages) != 5 || p.Messages[0].MsgID != 20 || !p.More {
		t.Fatalf("page %+v", p)
	}
}

// The persister adds a batch to the window just before it raises the head
// (a ZADD, then the trim script). A pull between the two sees messages past
// the head, and must still say that more follow a full page.
func TestPullSaysMoreWhileTheHeadLagsTheWindow(t *testing.T) {
	h := lagHeadHistory(t)
	ctx := context.Background()
	p, err := h.Pull(ctx, "g", 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ids := msgIDs(p.Messages); fmt.Sprint(ids) != "[1 2 3]" || !p.More || p.Head != 3 {
		t.Fatalf("Pull(after 0, limit 3) = %v, more=%v, head %d; want [1 2 3], more (4..6 follow), head 3", ids, p.More, p.Head)
	}
	p, err = h.Pull(ctx, "g", 3, 3)
	if ids := msgIDs(p.Messages); err != nil || fmt.Sprint(ids) != "[4 5 6]" || p.More || p.Head != 6 {
		t.Fatalf("Pull(after 3, limit 3) = %v, more=%v, head %d, %v; want [4 5 6], no more, head 6", ids, p.More, p.Head, err)
	}
}

func msgIDs(msgs []schema.Message) []int64 {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.MsgID
	}
	return ids
}

// The same lagging head for a client scrolling up: a page before msgid 7
// holds 4..6, which the window has and the head does not count yet. The
// page's head must not be older than the page's own newest message.
func TestPullBeforeHeadCoversThePageWhileTheHeadLags(t *testing.T) {
	h := lagHeadHistory(t)
	ctx := context.Background()
	p, err := h.PullBefore(ctx, "g", -1, 7, 3)
	if ids := msgIDs(p.Messages); err != nil || fmt.Sprint(ids) != "[4 5 6]" || !p.More || p.Head != 6 {
		t.Fatalf("PullBefore(before 7, limit 3) = %v, more=%v, head %d, %v; want [4 5 6], more (0..3 precede), head 6", ids, p.More, p.Head, err)
	}
}

// lagHeadHistory returns a History on a fresh redis-server whose group g has
// messages 0..6 in its window and its head still at 2: the persister added
// 3..6 and has not raised the head yet.
func lagHeadHistory(t *testing.T) *History {
	t.Helper()
	srv := testserver.NewRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })
	r, err := store.NewRedis(rc, store.RedisConfig{WindowSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.AppendWindow(ctx, nil, gapMsgs("g", 0, 1, 2, 3, 4, 5, 6)); err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(ctx, "chat:{g}:head", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Redis: r})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A window seeded with only its floor (a group silent since before the
// log's start, whose window was rebuilt) and the persister's next messages
// in ClickHouse before the window takes them: a page scrolling up before
// the newest is served from ClickHouse, not refused as if ClickHouse
// lacked the floor (which told operators to run a backfill).
func TestPullBeforeAboveASeededFloorIsServedFromClickHouse(t *testing.T) {
	ctx := context.Background()
	h := seededAt29(t, span(0, 34)...)
	for _, tc := range []struct {
		before, limit int
		want          string
	}{
		{35, 5, "[30 31 32 33 34]"}, // stops above the floor
		{35, 6, "[29 30 31 32 33 34]"},
		{32, 5, "[27 28 29 30 31]"},
	} {
		p, err := h.PullBefore(ctx, "g", -1, int64(tc.before), tc.limit)
		if got := fmt.Sprint(msgIDs(p.Messages)); err != nil || got != tc.want || !p.More {
			t.Errorf("PullBefore(before %d, limit %d) = %s (more %v), %v; want %s, more", tc.before, tc.limit, got, p.More, err, tc.want)
		}
	}
	// ClickHouse lacking the floor is still refused.
	h2 := seededAt29(t, append(span(0, 28), span(30, 34)...)...)
	if p, err := h2.PullBefore(ctx, "g", -1, 35, 10); !errors.Is(err, ErrIncomplete) {
		t.Errorf("PullBefore(before 35) over a ClickHouse without the floor = %v, %v; want ErrIncomplete", msgIDs(p.Messages), err)
	}
}

// seededAt29 stores the messages inCH of group g in ClickHouse and seeds
// g's window with only its floor, 29, and returns a History over both.
func seededAt29(t *testing.T, inCH ...int64) *History {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t, 10, true)
	if err := f.ch.InsertMessages(ctx, 0, gapMsgs("g", inCH...)); err != nil {
		t.Fatal(err)
	}
	if err := f.redis.SeedWindows(ctx, nil, map[string]int64{"g": 29}); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Redis: f.redis, ClickHouse: f.ch})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
