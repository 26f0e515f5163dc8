package history

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
)

var dbSeq atomic.Int64

type fixture struct {
	redis *store.Redis
	rc    *redis.Client
	ch    *store.ClickHouse
}

func newFixture(tb testing.TB, window int, withCH bool) *fixture {
	tb.Helper()
	srv := testserver.NewRedis(tb)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	tb.Cleanup(func() { rc.Close() })
	r, err := store.NewRedis(rc, store.RedisConfig{WindowSize: window})
	if err != nil {
		tb.Fatal(err)
	}
	f := &fixture{redis: r, rc: rc}
	if withCH {
		chs := testserver.SharedClickHouse(tb)
		db := fmt.Sprintf("hist%d_%d", time.Now().UnixNano()%1e6, dbSeq.Add(1))
		if f.ch, err = store.OpenClickHouse(context.Background(), store.ClickHouseConfig{Addrs: []string{chs.Addr}, Database: db}); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { f.ch.Close() })
	}
	return f
}

// seed stores perGroup messages in each of groups, the way the persister
// does: ClickHouse first, then the window. msgids interleave across groups.
func (f *fixture) seed(tb testing.TB, groups, perGroup, body int) map[string][]int64 {
	tb.Helper()
	ctx := context.Background()
	ids := map[string][]int64{}
	var batch []schema.Message
	flush := func() {
		if f.ch != nil {
			if err := f.ch.InsertMessages(ctx, 0, batch); err != nil {
				tb.Fatal(err)
			}
		}
		if err := f.redis.AppendWindow(ctx, nil, batch); err != nil {
			tb.Fatal(err)
		}
		batch = batch[:0]
	}
	var id int64
	for i := 0; i < perGroup; i++ {
		for g := 0; g < groups; g++ {
			gid := fmt.Sprintf("g%d", g)
			batch = append(batch, schema.Message{Gid: gid, Sender: "u", ClientMsgID: fmt.Sprint("c", id), SentAt: 1, Body: make([]byte, body), MsgID: id})
			ids[gid] = append(ids[gid], id)
			id += 2 // msgids of a group are not consecutive
			if len(batch) == 10000 {
				flush()
			}
		}
	}
	flush()
	return ids
}

func pullAll(tb testing.TB, h *History, gid string, page int) (n int, sources map[Source]int) {
	tb.Helper()
	sources = map[Source]int{}
	after := int64(-1)
	for {
		p, err := h.Pull(context.Background(), gid, after, page)
		if err != nil {
			tb.Fatal(err)
		}
		sources[p.Source]++
		for _, m := range p.Messages {
			if m.MsgID <= after {
				tb.Fatalf("%s: msgid %d after %d", gid, m.MsgID, after)
			}
			after = m.MsgID
			n++
		}
		if !p.More {
			return n, sources
		}
	}
}

func TestPullFallsBackToClickHouseAndStaysContiguous(t *testing.T) {
	f := newFixture(t, 100, true)
	ids := f.seed(t, 3, 450, 10)
	h, err := New(Config{Redis: f.redis, ClickHouse: f.ch})
	if err != nil {
		t.Fatal(err)
	}
	for gid, want := range ids {
		after, i := int64(-1), 0
		for {
			p, err := h.Pull(context.Background(), gid, after, 64)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range p.Messages {
				if m.MsgID != want[i] {
					t.Fatalf("%s: message %d is %d, want %d", gid, i, m.MsgID, want[i])
				}
				i++
				after = m.MsgID
			}
			if p.Head != want[len(want)-1] {
				t.Fatalf("head %d, want %d", p.Head, want[len(want)-1])
			}
			if !p.More {
				break
			}
		}
		if i != len(want) {
			t.Fatalf("%s: pulled %d of %d", gid, i, len(want))
		}
	}
	if u, _ := h.Unread(context.Background(), "g0", -1); u.Exact || u.String() != "100+" {
		t.Fatalf("unread from the start = %v, want 100+", u)
	}
}

// A page of large messages reads from Redis about what a gateway sends of
// it (history.PageBytes), not the whole page asked for: a member could
// otherwise fill a group with 16 KiB messages and have each pull of 1,000
// copy 16 MiB out of Redis to send 1 MiB. Pages both ways are cut by bytes,
// say that more follow, and together give every message once.
func TestAPageOfLargeMessagesReadsOnlyWhatItSends(t *testing.T) {
	f := newFixture(t, 1000, false)
	ids := f.seed(t, 1, 1000, 16<<10)["g0"]
	h, err := New(Config{Redis: f.redis})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sent := func() int64 {
		t.Helper()
		v, err := testserver.RedisInfo(ctx, f.rc, "stats", "total_net_output_bytes")
		n, perr := strconv.ParseInt(v, 10, 64)
		if err != nil || perr != nil {
			t.Fatalf("INFO stats total_net_output_bytes = %q, %v", v, err)
		}
		return n
	}
	for _, dir := range []string{"after", "before"} {
		before := sent()
		var p Page
		if dir == "after" {
			p, err = h.Pull(ctx, "g0", -1, 1000)
		} else {
			p, err = h.PullBefore(ctx, "g0", -1, ids[len(ids)-1]+1, 1000)
		}
		if err != nil {
			t.Fatal(err)
		}
		read := sent() - before
		if n := len(p.Messages); n == 0 || n > PageBytes/(16<<10) || !p.More || read > 2*PageBytes {
			t.Errorf("a page %s of 1,000 messages of 16 KiB: %d messages, more %v, %d KiB read from Redis; want at most %d, more, at most %d KiB read",
				dir, n, p.More, read>>10, PageBytes/(16<<10), 2*PageBytes>>10)
		}
	}
	if n, _ := pullAll(t, h, "g0", 1000); n != len(ids) {
		t.Fatalf("paging through the group gave %d messages; want %d", n, len(ids))
	}
}

// A page of large messages from ClickHouse is cut by bytes as the window's
// is: a pull of 1,000 messages of 16 KiB read and decoded all 16 MiB of
// bodies (119 MiB allocated) for a gateway to send 1 MiB. (The driver
// allocates about eight times what it decodes.)
func TestAPageOfLargeMessagesFromClickHouseReadsOnlyWhatItSends(t *testing.T) {
	f := newFixture(t, 10, true)
	ids := f.seed(t, 1, 1000, 16<<10)["g0"]
	h, err := New(Config{Redis: f.redis, ClickHouse: f.ch})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	floor := ids[len(ids)-11] // the newest message the window of 10 dropped
	for _, dir := range []string{"after", "before"} {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		var p Page
		if dir == "after" {
			p, err = h.Pull(ctx, "g0", -1, 1000)
		} else {
			p, err = h.PullBefore(ctx, "g0", -1, floor+1, 1000)
		}
		runtime.ReadMemStats(&m1)
		if err != nil {
			t.Fatal(err)
		}
		alloc := m1.TotalAlloc - m0.TotalAlloc
		t.Logf("a page %s from %s: %d messages, %d KiB allocated", dir, p.Source, len(p.Messages), alloc>>10)
		if n := len(p.Messages); p.Source != FromClickHouse || n == 0 || n > PageBytes/(16<<10) || !p.More || alloc > 16*PageBytes {
			t.Errorf("a page %s of 1,000 messages of 16 KiB from %s: %d messages, more %v, %d KiB allocated; want from ClickHouse, at most %d, more, at most %d KiB allocated",
				dir, p.Source, n, p.More, alloc>>10, PageBytes/(16<<10), 16*PageBytes>>10)
		}
	}
	if n, _ := pullAll(t, h, "g0", 1000); n != len(ids) {
		t.Fatalf("paging through the group gave %d messages; want %d", n, len(ids))
	}
	var got []int64
	for before := int64(math.MaxInt64); ; {
		p, err := h.PullBefore(ctx, "g0", -1, before, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got = append(msgIDs(p.Messages), got...)
		if !p.More {
			break
		}
		before = p.Messages[0].MsgID
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("paging up through the group gave %d messages; want the %d in order", len(got), len(ids))
	}
}

func TestPullWithoutClickHouseSaysOldHistoryIsGone(t *testing.T) {
	f := newFixture(t, 10, false)
	f.seed(t, 1, 30, 1)
	h, _ := New(Config{Redis: f.redis})
	if _, err := h.Pull(context.Background(), "g0", -1, 5); !errors.Is(err, ErrNoHistory) {
		t.Fatalf("pull before the window without ClickHouse: %v, want ErrNoHistory", err)
	}
	if p, err := h.Pull(context.Background(), "g0", 40, 5); err != nil || len(p.Messages) != 5 {
		t.Fatalf("pull inside the window: %v %v", p, err)
	}
	if p, err := h.Pull(context.Background(), "nobody", -1, 5); err != nil || len(p.Messages) != 0 || p.More || p.Head != -1 {
		t.Fatalf("pull of an empty group: %+v %v", p, err)
	}
}

// BenchmarkPull50k pulls 50,000 messages across 50 groups (pages of 1,000,
// 200-byte bodies), once from the Redis window and once from ClickHouse.
func BenchmarkPull50k(b *testing.B) {
	for _, src := range []struct {
		name   string
		window int
	}{{"window", -1}, {"clickhouse", 1}} {
		b.Run(src.name, func(b *testing.B) {
			f := newFixture(b, src.window, true)
			ids := f.seed(b, 50, 1000, 200)
			h, _ := New(Config{Redis: f.redis, ClickHouse: f.ch})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				total := 0
				for gid := range ids {
					n, sources := pullAll(b, h, gid, 1000)
					if sources[Source(src.name)] == 0 {
						b.Fatalf("pages came from %v, want %s", sources, src.name)
					}
					total += n
				}
				if total != 50000 {
					b.Fatalf("pulled %d", total)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/50k")
		})
	}
}
