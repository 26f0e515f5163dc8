package consumers

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// A Redis restarted from an older snapshot (RDB saves, an AOF that lost
// its last second) or replaced by a lagging replica holds a consumer's
// last saved position but not the effects made after it. The position
// being the one the runner expects, only the server's identity tells.

// snapshotRedis snapshots Redis now (SAVE), so that restartRedis
// brings back the data as it is at this point.
func (p *pipeline) snapshotRedis(t *testing.T) {
	t.Helper()
	if err := p.rc.Save(context.Background()).Err(); err != nil {
		t.Fatalf("SAVE: %v", err)
	}
}

// restartRedis kills redis-server (kill -9) and starts it again on the same
// port and dir: it loads the last snapshot.
func (p *pipeline) restartRedis(t *testing.T) {
	t.Helper()
	if err := p.redisSrv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := p.redisSrv.Start(); err != nil {
		t.Fatal(err)
	}
}

// waitSaved waits until consumer's saved position in partition 0 of topic
// is at.
func (p *pipeline) waitSaved(t *testing.T, consumer, topic string, at int64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("position %d of %s saved", at, consumer), 30*time.Second, func() bool {
		off, _ := p.redis.Offsets(context.Background(), consumer, topic)
		return off[0] == at
	})
}

func TestPersisterReplaysWhatARedisRestartedFromASnapshotLost(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000, clickhouse: true})
	tune := p.base.Tune
	// Long enough that the messages after the snapshot are handled and not
	// saved by the time Redis is back: a save in between would move the
	// position away from the snapshot's, which is caught without the
	// detector.
	p.base.Tune = func(r *RunnerTuning) { tune(r); r.CommitInterval = 6 * time.Second }
	ctx := context.Background()
	s := sent{}
	p.sendTo(t, []string{"g"}, 5, s) // 0..4
	p.persister(t, nil)
	p.waitPersisted(t, s, 30*time.Second)
	p.waitSaved(t, GroupPersister, topics.Messages, s["g"][4]+1)
	p.snapshotRedis(t)

	p.sendTo(t, []string{"g"}, 3, s) // 5..7: in the window, the position not saved
	p.waitPersisted(t, s, 5*time.Second)
	if off, _ := p.redis.Offsets(ctx, GroupPersister, topics.Messages); off[0] != s["g"][4]+1 {
		t.Fatalf("position %d saved before the restart; the test needs it at %d", off[0], s["g"][4]+1)
	}
	p.restartRedis(t)
	if off, _ := p.redis.Offsets(ctx, GroupPersister, topics.Messages); off[0] != s["g"][4]+1 {
		t.Fatalf("after the restart the saved position is %v, want the snapshot's %d", off, s["g"][4]+1)
	}

	p.sendTo(t, []string{"g"}, 2, s) // 8, 9
	h, err := history.New(history.Config{Redis: p.redis, ClickHouse: p.ch})
	if err != nil {
		t.Fatal(err)
	}
	ids := s["g"]
	var got []int64
	var src history.Source
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		page, err := h.Pull(ctx, "g", ids[4], 100)
		if err != nil {
			t.Fatal(err)
		}
		got, src = got[:0], page.Source
		for _, m := range page.Messages {
			got = append(got, m.MsgID)
		}
		if slices.Equal(got, ids[5:]) && src == history.FromWindow {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pull after %d = %v (source %s), want %v from the window: the messages handled after the snapshot were not replayed", ids[4], got, src, ids[5:])
		}
	}
}

func TestAckProjectorReplaysACursorARedisRestartedFromASnapshotLost(t *testing.T) {
	p := newPipeline(t, pipelineOpts{partitions: 1, window: 1000})
	tune := p.base.Tune
	p.base.Tune = func(r *RunnerTuning) { tune(r); r.CommitInterval = 6 * time.Second }
	ctx := context.Background()
	ack := func(uid string, upto int64) {
		t.Helper()
		if err := p.prod.SendAcks(ctx, schema.Ack{Gid: "g", Uid: uid, Upto: upto, At: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
	}
	cursors := func() string {
		c, err := p.redis.AckCursors(ctx, "g")
		if err != nil {
			return err.Error()
		}
		return fmt.Sprint(c)
	}
	ack("u1", 5) // offset 0
	p.ackProjector(t)
	waitFor(t, "u1 at 5", 20*time.Second, func() bool { return cursors() == "map[u1:5]" })
	p.waitSaved(t, GroupAckProjector, topics.Acks, 1)
	p.snapshotRedis(t)

	ack("u2", 7) // offset 1: applied, not saved
	waitFor(t, "u2 at 7", 5*time.Second, func() bool { return cursors() == "map[u1:5 u2:7]" })
	p.restartRedis(t)
	if got := cursors(); got != "map[u1:5]" {
		t.Fatalf("after the restart the cursors are %s; the test needs the snapshot's map[u1:5]", got)
	}
	ack("u1", 9) // offset 2
	for deadline := time.Now().Add(20 * time.Second); cursors() != "map[u1:9 u2:7]"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("cursors %s, want map[u1:9 u2:7]: the ack handled after the snapshot was not replayed", cursors())
		}
	}
}
