package consumers

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/metrics"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// The persister's replays over a log whose start retention has moved
// above 0: ClickHouse holds what the topic no longer does.

// When Redis is lost, the persister rebuilds the window from what the
// topic still holds. The window must then say that older messages exist (a
// floor that ClickHouse holds), so that a member whose cursor is below the
// rebuilt window gets them from ClickHouse, never a page that jumps over
// them, and the fan-out does not say the group had nothing before.
func TestPersisterRebuildingAfterRetentionKeepsTheOlderHistoryReachable(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	ctx := context.Background()
	s := sent{}
	p.send(t, 1, 10, s) // g0: msgids 0..9
	ids := s["g0"]
	_, stop := p.persister(t, nil)
	p.waitPersisted(t, s, 30*time.Second)
	stop()

	p.retainAndWipe(t, ids[5]) // retention removes the first five records; then Redis loses its data
	p.persister(t, nil)        // replays what the topic holds
	p.waitPersisted(t, s, 30*time.Second)

	if n, _ := p.ch.CountMessages(ctx, "g0"); n != int64(len(ids)) {
		t.Fatalf("ClickHouse holds %d messages of g0, want %d", n, len(ids))
	}
	h, _ := history.New(history.Config{Redis: p.redis, ClickHouse: p.ch})
	// A member who received up to ids[2] pulls the rest.
	page, err := h.Pull(ctx, "g0", ids[2], 100)
	if err != nil {
		t.Fatalf("pull of g0 after %d: %v; ClickHouse holds every message", ids[2], err)
	}
	var got []int64
	for _, m := range page.Messages {
		got = append(got, m.MsgID)
	}
	if !slices.Equal(got, ids[3:]) || page.More {
		t.Fatalf("pull of g0 after %d returned %v (more=%v, source=%s), want %v: a page that jumps over messages only ClickHouse holds makes the client ack past them",
			ids[2], got, page.More, page.Source, ids[3:])
	}
	prevs, err := p.redis.PersistedPrevs(ctx, GroupPersister, topics.Messages, 0, ids[5], map[string]int64{"g0": ids[5]})
	if err != nil {
		t.Fatal(err)
	}
	if prev, ok := prevs["g0"]; ok && prev != ids[4] {
		t.Fatalf("prev of %d is %d, want %d or unknown", ids[5], prev, ids[4])
	}
}

// sendAsU1 returns a function that sends, as u1 into gid at sentAt, a
// message with the client_msg_id it is given, and returns its msgid.
func (p *pipeline) sendAsU1(t *testing.T, gid string, sentAt int64) func(cmid string) int64 {
	return func(cmid string) int64 {
		t.Helper()
		id, err := p.prod.SendMessage(context.Background(), &schema.Message{Gid: gid, Sender: "u1", ClientMsgID: cmid, SentAt: sentAt, Body: []byte(cmid)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
}

// storedIDs returns the msgids ClickHouse holds of gid, up to upto.
func (p *pipeline) storedIDs(t *testing.T, gid string, upto int64) []int64 {
	t.Helper()
	msgs, err := p.ch.Messages(context.Background(), gid, -1, upto, 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, m := range msgs {
		ids = append(ids, m.MsgID)
	}
	return ids
}

// retainAndWipe has retention remove partition 0 of chat.messages below
// offset before, then Redis lose its data.
func (p *pipeline) retainAndWipe(t *testing.T, before int64) {
	t.Helper()
	testserver.DeleteRecordsBefore(t, p.brokers(), topics.Messages, 0, before)
	if err := p.rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
}

// The persister drops a resend (same gid, sender and client_msg_id within
// the dedup window) by its first send's claim in Redis. When Redis is lost
// and retention has already removed the first send from chat.messages, the
// replay meets the resend without it: the first send, in ClickHouse, must
// still make it a duplicate rather than a second visible message.
func TestPersisterRebuildingAfterRetentionDropsAResendOfARemovedSend(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	ctx := context.Background()
	send := p.sendAsU1(t, "g0", time.Now().UnixMilli())
	orig := send("c-1")
	send("c-2")
	resend := send("c-1") // the gateway's resend after a lost answer
	last := send("c-3")
	_, stop := p.persister(t, nil)
	p.waitPersisted(t, sent{"g0": {last}}, 30*time.Second)
	stop()
	if n, _ := p.ch.CountMessages(ctx, "g0"); n != 3 {
		t.Fatalf("ClickHouse holds %d messages of g0 before the replay, want 3 (the resend dropped)", n)
	}

	p.retainAndWipe(t, orig+1) // retention removes the first send; Redis restarts empty
	p.persister(t, nil)
	p.waitPersisted(t, sent{"g0": {last}}, 30*time.Second)

	ids := p.storedIDs(t, "g0", last)
	if len(ids) != 3 {
		t.Fatalf("after the replay ClickHouse holds g0 msgids %v: the resend %d of %d (client_msg_id c-1) is now a second visible message",
			ids, resend, orig)
	}
	wr, err := p.redis.Window(ctx, "g0", -1, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range wr.Messages {
		if m.MsgID == resend {
			t.Fatalf("the window holds the resend %d of %d after the replay", resend, orig)
		}
	}
}

// A replay after retention and Redis's loss can stop in the middle (a
// crash, a deploy). The persister restarted from the saved position must
// still know where the rebuilt state began, or a resend of a send that
// retention removed, arriving after the restart, finds no claim and is
// stored as a second message.
func TestPersisterRestartedInAReplayAfterRetentionDropsAResendOfARemovedSend(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	send := p.sendAsU1(t, "g0", time.Now().UnixMilli())
	orig := send("c-1")
	last := send("c-2")
	_, stop := p.persister(t, nil)
	p.waitPersisted(t, sent{"g0": {last}}, 30*time.Second)
	stop()

	p.retainAndWipe(t, orig+1)    // retention removes the first send; Redis restarts empty
	_, stop = p.persister(t, nil) // the replay
	p.waitPersisted(t, sent{"g0": {last}}, 30*time.Second)
	stop() // and a restart before the dedup window of its first record ends

	resend := send("c-1") // the gateway's resend after a lost answer
	after := send("c-3")
	p.persister(t, nil)
	p.waitPersisted(t, sent{"g0": {after}}, 30*time.Second)

	ids := p.storedIDs(t, "g0", after)
	if want := []int64{orig, last, after}; !slices.Equal(ids, want) {
		t.Fatalf("ClickHouse holds g0 msgids %v, want %v: the resend %d of %d (client_msg_id c-1) became a second visible message",
			ids, want, resend, orig)
	}
}

// A state built from the partition's first record holds every group's
// whole history, so a restart of the persister over it asks ClickHouse
// for no floors, not even for a group new to the deployment (a query per
// batch with such a group, otherwise).
func TestPersisterRestartedOverAWholeLogQueriesNoFloors(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	ctx := context.Background()
	s := sent{}
	p.send(t, 1, 5, s) // g0
	_, stop := p.persister(t, nil)
	p.waitPersisted(t, s, 30*time.Second)
	stop()

	reg := prometheus.NewRegistry()
	set, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.chCfg
	cfg.Metrics = set
	ch, err := store.OpenClickHouse(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	queries := func() uint64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if f.GetName() == "chat_store_seconds" && labels["store"] == "clickhouse" && labels["op"] == "query" {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
		return 0
	}
	before := queries()

	per := &Persister{Redis: p.redis, ClickHouse: ch}
	r, err := per.Runner(p.base)
	if err != nil {
		t.Fatal(err)
	}
	start(t, r.Run)
	fresh := sent{}
	p.sendTo(t, []string{"g1", "g2"}, 3, fresh) // groups new to the deployment
	p.waitPersisted(t, fresh, 30*time.Second)
	if n := queries() - before; n != 0 {
		t.Fatalf("the persister restarted over a state that began at offset 0 made %d ClickHouse queries for 2 new groups, want 0", n)
	}
	if n, _ := ch.CountMessages(ctx, "g1"); n != 3 {
		t.Fatalf("ClickHouse holds %d messages of g1, want 3", n)
	}
}

// An operator who resets the persister to a point in time (chatctl
// consumer-groups reset) makes it read sends again whose first sends came
// before that point, maybe after their claims expired. Each must stay a
// duplicate, as the first time: the persister looks those first sends up
// in ClickHouse, as it does after a replay whose log start retention moved.
func TestPersisterResetByHandKeepsResendsOfEarlierSendsOut(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	ctx := context.Background()
	const win = time.Second
	rds, err := store.NewRedis(p.rc, store.RedisConfig{WindowSize: 1000, DedupWindow: win})
	if err != nil {
		t.Fatal(err)
	}
	send := p.sendAsU1(t, "g0", time.Now().UnixMilli())
	orig := send("c-1")
	resend := send("c-1") // the gateway's resend after a lost answer
	last := send("c-2")
	run := func() func() {
		r, err := (&Persister{Redis: rds, ClickHouse: p.ch}).Runner(p.base)
		if err != nil {
			t.Fatal(err)
		}
		return start(t, r.Run)
	}
	stop := run()
	p.waitPersisted(t, sent{"g0": {last}}, 30*time.Second)
	stop()
	if n, _ := p.ch.CountMessages(ctx, "g0"); n != 2 {
		t.Fatalf("ClickHouse holds %d messages of g0, want 2 (the resend dropped)", n)
	}

	time.Sleep(win + 500*time.Millisecond) // the claims expire
	if err := rds.SaveOffsets(ctx, GroupPersister, topics.Messages, map[int]int64{0: resend}); err != nil {
		t.Fatal(err) // what chatctl consumer-groups reset writes
	}
	run()
	after := send("c-3")
	p.waitPersisted(t, sent{"g0": {after}}, 30*time.Second)
	ids := p.storedIDs(t, "g0", after)
	if want := []int64{orig, last, after}; !slices.Equal(ids, want) {
		t.Fatalf("after the reset ClickHouse holds g0 msgids %v, want %v: the resend %d of %d became a second visible message", ids, want, resend, orig)
	}
}
