package consumers

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// pipeline is kfake in process plus a real redis-server and, when asked,
// a real clickhouse-server with a database of its own.
type pipeline struct {
	*kafkaEnv
	redisSrv *testserver.Redis
	rc       redis.UniversalClient
	redis    *store.Redis
	chSrv    *testserver.ClickHouse
	ch       *store.ClickHouse
	chCfg    store.ClickHouseConfig // ch's, to open another client of its database
	base     Base
	joins    map[string]int64 // gid/uid -> position of the join p.member wrote last
}

var dbSeq, cmidSeq atomic.Int64

type pipelineOpts struct {
	partitions int
	window     int
	clickhouse bool
	ownCH      bool // a clickhouse-server of the test's own, to stop and start
}

func newPipeline(t *testing.T, o pipelineOpts) *pipeline {
	t.Helper()
	p := &pipeline{kafkaEnv: newKafka(t, o.partitions), joins: map[string]int64{}}
	p.redisSrv = testserver.NewRedis(t)
	p.rc = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{p.redisSrv.Addr}})
	t.Cleanup(func() { p.rc.Close() })
	var err error
	if p.redis, err = store.NewRedis(p.rc, store.RedisConfig{WindowSize: o.window}); err != nil {
		t.Fatal(err)
	}
	if o.clickhouse {
		if o.ownCH {
			p.chSrv = testserver.NewClickHouse(t)
		} else {
			p.chSrv = testserver.SharedClickHouse(t)
		}
		ctx := context.Background()
		db := fmt.Sprintf("pipe%d_%d", time.Now().UnixNano()%1e6, dbSeq.Add(1))
		p.chCfg = store.ClickHouseConfig{Addrs: []string{p.chSrv.Addr}, Database: db, QueryTimeout: 5 * time.Second}
		p.ch, err = store.OpenClickHouse(ctx, p.chCfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.ch.Close() })
	}
	p.base = Base{Brokers: p.brokers(), DeadLetter: p.prod, Tune: func(r *RunnerTuning) {
		r.MinBackoff, r.MaxBackoff = 20*time.Millisecond, 200*time.Millisecond
		r.SessionTimeout, r.RebalanceTimeout = 6*time.Second, 2*time.Second
	}}
	return p
}

func (p *pipeline) persister(t *testing.T, hook func() error) (*Runner[schema.Message], func()) {
	t.Helper()
	per := &Persister{Redis: p.redis, ClickHouse: p.ch, afterInsert: hook}
	r, err := per.Runner(p.base)
	if err != nil {
		t.Fatal(err)
	}
	return r, start(t, r.Run)
}

// sent is what the test sent: msgids per group, in order.
type sent map[string][]int64

func (p *pipeline) send(t *testing.T, groups, perGroup int, s sent) {
	t.Helper()
	gids := make([]string, groups)
	for g := range gids {
		gids[g] = fmt.Sprintf("g%d", g)
	}
	p.sendTo(t, gids, perGroup, s)
}

// sendTo sends perGroup messages to each of gids, interleaved.
func (p *pipeline) sendTo(t *testing.T, gids []string, perGroup int, s sent) {
	t.Helper()
	var ms []schema.Message
	for i := 0; i < perGroup; i++ {
		for _, gid := range gids {
			ms = append(ms, schema.Message{Gid: gid, Sender: "u1", ClientMsgID: fmt.Sprintf("c%d", cmidSeq.Add(1)),
				SentAt: time.Now().UnixMilli(), Body: []byte(fmt.Sprintf("message %d of %s", i, gid))})
		}
	}
	ids, err := p.prod.SendMessages(context.Background(), ms)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		s[m.Gid] = append(s[m.Gid], ids[i])
	}
}

// waitPersisted waits until every group's head in Redis is its last msgid.
func (p *pipeline) waitPersisted(t *testing.T, s sent, timeout time.Duration) {
	t.Helper()
	waitFor(t, "every group persisted", timeout, func() bool {
		for gid, ids := range s {
			h, err := p.redis.Head(context.Background(), gid)
			if err != nil || h != ids[len(ids)-1] {
				return false
			}
		}
		return true
	})
}

// pullAll pages through gid from the start and checks every page is a
// contiguous run of what was sent.
func pullAll(t *testing.T, h *history.History, gid string, want []int64, pageSize int) map[history.Source]int {
	t.Helper()
	sources := map[history.Source]int{}
	after, i := int64(-1), 0
	for {
		page, err := h.Pull(context.Background(), gid, after, pageSize)
		if err != nil {
			t.Fatalf("pull %s after %d: %v", gid, after, err)
		}
		sources[page.Source]++
		for _, m := range page.Messages {
			if i >= len(want) || m.MsgID != want[i] {
				t.Fatalf("pull %s: message %d has msgid %d, want %v", gid, i, m.MsgID, want[min(i, len(want)-1)])
			}
			i++
		}
		if len(page.Messages) > 0 {
			after = page.Messages[len(page.Messages)-1].MsgID
		}
		if !page.More {
			break
		}
		if len(page.Messages) == 0 {
			t.Fatalf("pull %s after %d: empty page that says more follows", gid, after)
		}
	}
	if i != len(want) {
		t.Fatalf("pull %s: got %d messages, want %d", gid, i, len(want))
	}
	return sources
}

func TestPersisterStoresEachMessageOnceAndPullPagesThroughIt(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 8, window: 50, clickhouse: true})
	s := sent{}
	p.send(t, 40, 120, s) // 4,800 messages over 40 groups
	parts := map[int]bool{}
	for gid := range s {
		parts[topics.Partition(gid, 8)] = true
	}
	if len(parts) != 8 {
		t.Fatalf("the groups cover %d of 8 partitions", len(parts))
	}
	p.persister(t, nil)
	p.waitPersisted(t, s, 30*time.Second)

	h, err := history.New(history.Config{Redis: p.redis, ClickHouse: p.ch})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for gid, ids := range s {
		n, err := p.ch.CountMessages(ctx, gid)
		if err != nil || n != int64(len(ids)) {
			t.Fatalf("ClickHouse holds %d messages of %s (err %v), want %d", n, gid, err, len(ids))
		}
		src := pullAll(t, h, gid, ids, 32)
		if src[history.FromClickHouse] == 0 || src[history.FromWindow] == 0 {
			t.Fatalf("pull of %s used %v; want pages from both the window and ClickHouse", gid, src)
		}
	}
	u, err := h.Unread(ctx, "g1", s["g1"][len(s["g1"])-11])
	if err != nil || u.Count != 10 || !u.Exact {
		t.Fatalf("unread after the 11th-last message = %v (err %v), want exactly 10", u, err)
	}
	u, _ = h.Unread(ctx, "g1", -1)
	if u.Exact || u.Count != 50 {
		t.Fatalf("unread from the start = %v, want 50+ (window of 50)", u)
	}
}

func TestPersisterCrashBetweenInsertAndCommit(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 2, window: 1000, clickhouse: true})
	s := sent{}
	p.send(t, 6, 50, s)
	crashed := make(chan struct{})
	var once atomic.Bool
	_, stop := p.persister(t, func() error {
		if once.CompareAndSwap(false, true) {
			close(crashed)
		}
		// The process is dead: nothing after the insert ever happens.
		return fmt.Errorf("crashed after the ClickHouse insert")
	})
	<-crashed
	stop()
	ctx := context.Background()
	var inCH int64
	for gid := range s {
		n, _ := p.ch.CountMessages(ctx, gid)
		inCH += n
	}
	if inCH == 0 {
		t.Fatal("nothing reached ClickHouse before the crash; the test proves nothing")
	}
	// Each partition holds at most the start it claimed before reading.
	if off, _ := p.redis.Offsets(ctx, GroupPersister, topics.Messages); len(off) != 0 {
		for part, o := range off {
			if o != kafka.FirstOffset {
				t.Fatalf("partition %d saved at %d before the batch finished: %v", part, o, off)
			}
		}
	}

	p.persister(t, nil) // the restarted process
	p.waitPersisted(t, s, 30*time.Second)
	h, _ := history.New(history.Config{Redis: p.redis, ClickHouse: p.ch})
	for gid, ids := range s {
		if n, _ := p.ch.CountMessages(ctx, gid); n != int64(len(ids)) {
			t.Fatalf("%s: %d distinct messages in ClickHouse, want %d", gid, n, len(ids))
		}
		msgs, err := p.ch.Messages(ctx, gid, -1, math.MaxInt64, 1000)
		if err != nil || len(msgs) != len(ids) {
			t.Fatalf("%s: ClickHouse query returned %d rows (err %v), want %d, no duplicate", gid, len(msgs), err, len(ids))
		}
		pullAll(t, h, gid, ids, 7)
	}
}

func TestResendWithSameClientMsgIDYieldsOneMessage(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 2, window: 1000, clickhouse: true})
	ctx := context.Background()
	now := time.Now().UnixMilli()
	m := schema.Message{Gid: "g1", Sender: "alice", ClientMsgID: "c-1", SentAt: now, Body: []byte("hello")}
	first, err := p.prod.SendMessage(ctx, &m)
	if err != nil {
		t.Fatal(err)
	}
	m.SentAt += 3000 // the client resent after a timeout
	if _, err := p.prod.SendMessage(ctx, &m); err != nil {
		t.Fatal(err)
	}
	other := schema.Message{Gid: "g1", Sender: "bob", ClientMsgID: "c-1", SentAt: now, Body: []byte("same id, other sender")}
	bobs, err := p.prod.SendMessage(ctx, &other)
	if err != nil {
		t.Fatal(err)
	}
	p.persister(t, nil)
	p.waitPersisted(t, sent{"g1": {bobs}}, 20*time.Second)
	h, _ := history.New(history.Config{Redis: p.redis, ClickHouse: p.ch})
	page, err := h.Pull(ctx, "g1", -1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 2 || page.Messages[0].MsgID != first || page.Messages[1].MsgID != bobs {
		t.Fatalf("pulled %+v, want alice's first send (%d) and bob's (%d)", page.Messages, first, bobs)
	}
	if n, _ := p.ch.CountMessages(ctx, "g1"); n != 2 {
		t.Fatalf("ClickHouse holds %d messages, want 2", n)
	}
}

func TestPersisterRetriesWhileClickHouseIsDown(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 2, window: 1000, clickhouse: true, ownCH: true})
	s := sent{}
	p.send(t, 4, 10, s)
	r, _ := p.persister(t, nil)
	p.waitPersisted(t, s, 20*time.Second)

	if err := p.chSrv.Stop(); err != nil {
		t.Fatal(err)
	}
	more := sent{}
	p.send(t, 4, 25, more)
	waitFor(t, "the persister to retry", 20*time.Second, func() bool { return r.Stats().Retries >= 2 })
	ctx := context.Background()
	for gid, ids := range more {
		if h, _ := p.redis.Head(ctx, gid); h >= ids[0] {
			t.Fatalf("%s: head moved to %d while ClickHouse was down", gid, h)
		}
	}
	if err := p.chSrv.Start(); err != nil {
		t.Fatal(err)
	}
	p.waitPersisted(t, more, 60*time.Second)
	for gid := range more {
		want := len(s[gid]) + len(more[gid])
		if n, err := p.ch.CountMessages(ctx, gid); n != int64(want) {
			t.Fatalf("%s: ClickHouse has %d messages (err %v), want %d", gid, n, err, want)
		}
	}
}

func TestGarbageInChatMessagesIsDeadLetteredAndThePartitionFlows(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	s := sent{}
	p.send(t, 2, 3, s)
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(p.broker.Addr()), Topic: topics.Messages, BatchTimeout: time.Millisecond, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("g0"), Value: []byte{0xff, 0xfe, 0x00}}); err != nil {
		t.Fatal(err)
	}
	p.send(t, 2, 3, s)
	r, _ := p.persister(t, nil)
	p.waitPersisted(t, s, 20*time.Second)
	if got := r.Stats().DeadLettered; got != 1 {
		t.Fatalf("dead-lettered %d records, want 1", got)
	}
	h, _ := history.New(history.Config{Redis: p.redis})
	for gid, ids := range s {
		pullAll(t, h, gid, ids, 100)
	}
}

// A Redis wiped while the persister runs must not get the batch in hand:
// written into the empty window, it would make that window look like the
// group's whole history (no floor) and a pull would skip every message
// before it. The runner's own checks (commit, StateCheck) are set to an
// hour here, so only the persister's writes can notice the wipe.
func TestPersisterWritesNothingIntoAWipedRedis(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	ctx := context.Background()
	var armed, wiped atomic.Bool
	per := &Persister{Redis: p.redis, afterInsert: func() error {
		if armed.CompareAndSwap(true, false) {
			if err := p.rc.FlushAll(ctx).Err(); err != nil {
				return err
			}
			wiped.Store(true)
		}
		return nil
	}}
	base := p.base
	base.Tune = func(r *RunnerTuning) {
		p.base.Tune(r)
		r.CommitInterval = time.Hour
	}
	r, err := per.Runner(base)
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.StateCheck = time.Hour
	start(t, r.Run)

	s := sent{}
	p.send(t, 1, 5, s)
	p.waitPersisted(t, s, 20*time.Second)
	armed.Store(true)
	p.send(t, 1, 1, s)
	p.waitPersisted(t, s, 20*time.Second)
	if !wiped.Load() {
		t.Fatal("the wipe never happened; the test proves nothing")
	}
	h, _ := history.New(history.Config{Redis: p.redis})
	pullAll(t, h, "g0", s["g0"], 100)
	if got := r.Stats().Replays; got != 1 {
		t.Fatalf("the runner replayed %d times, want once", got)
	}
}
