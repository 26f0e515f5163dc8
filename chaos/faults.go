package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// The fault kinds, in the order of the first cycle's shuffle input.
var faultKinds = []string{
	"kill-9 gateway1", "kill-9 gateway2", "kill-9 fanout", "kill-9 persister", "kill-9 projector",
	"kill-9 broker", "redis-wipe", "clickhouse-stop", "client-killed-after-pull", "cut-mid-frame", "poison",
}

// poisonRec is a record no consumer can decode, written to a topic.
type poisonRec struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
}

// schedule returns when each fault happens: cycles of every kind in a
// random order, spread over [warm, span), at least one cycle.
func schedule(rng *rand.Rand, warm, span time.Duration) []scheduled {
	n := len(faultKinds)
	cycles := max(1, int((span-warm)/(100*time.Second)))
	total := cycles * n
	step := (span - warm) / time.Duration(total)
	var out []scheduled
	for c := range cycles {
		order := rng.Perm(n)
		for i, k := range order {
			slot := c*n + i
			jitter := time.Duration(rng.Int64N(int64(step)/2+1)) - step/4
			out = append(out, scheduled{at: warm + time.Duration(slot)*step + step/2 + jitter, kind: faultKinds[k]})
		}
	}
	return out
}

type scheduled struct {
	at   time.Duration // from the start of the load
	kind string
}

// runFaults injects the schedule; it returns when every fault is over
// (an outage that began before ctx ended is let run its course).
func (h *harness) runFaults(ctx context.Context, start time.Time, plan []scheduled) {
	var wg sync.WaitGroup
	for _, f := range plan {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-time.After(time.Until(start.Add(f.at))):
		}
		wg.Add(1)
		go func() { defer wg.Done(); h.inject(ctx, f.kind) }()
	}
	wg.Wait()
}

func (h *harness) inject(ctx context.Context, kind string) {
	restart := time.Duration(200+rand.IntN(2800)) * time.Millisecond
	switch kind {
	case "kill-9 gateway1", "kill-9 gateway2", "kill-9 fanout", "kill-9 persister", "kill-9 projector":
		name := kind[len("kill-9 "):]
		if h.c.roles[name].kill9(restart) {
			h.tl.fault("kill-9", name, "restarted by its supervisor", restart)
		}
	case "kill-9 broker":
		if h.c.broker.kill9(restart) {
			h.tl.fault("kill-9", "broker", "restarted on the same address and data dir", restart)
		}
	case "redis-wipe":
		if !h.redisDown.TryLock() {
			h.tl.note("redis-wipe skipped: Redis is being restarted already")
			return
		}
		defer h.redisDown.Unlock()
		h.redisWipe(ctx, restart)
	case "clickhouse-stop":
		if !h.chDown.TryLock() {
			h.tl.note("clickhouse-stop skipped: ClickHouse is down already")
			return
		}
		defer h.chDown.Unlock()
		h.tl.fault("clickhouse-stop", "clickhouse", "stopped (SIGTERM), started again after the outage", h.cfg.ClickHouseOutage)
		if err := h.c.chSrv.Stop(); err != nil {
			h.tl.note(fmt.Sprintf("clickhouse stop: %v", err))
		}
		time.Sleep(h.cfg.ClickHouseOutage) // even past the load's end: the outage is the fault
		h.startAgain("clickhouse", h.c.chSrv.Start)
	case "client-killed-after-pull":
		d := h.pickDevice(false)
		d.pullKill.Store(true)
		select {
		case d.wake <- struct{}{}:
		default:
		}
	case "cut-mid-frame":
		cut := 0
		picked := map[*device]bool{}
		for range 3 {
			d := h.pickDevice(true)
			if picked[d] {
				continue
			}
			picked[d] = true
			if px := d.proxy.Load(); px != nil {
				n := px.cutMidFrame()
				cut += n
				h.tl.fault("cut-mid-frame", d.name, fmt.Sprintf("%d connection(s) stop half way through the next chunk", n), 0)
			}
		}
		if cut == 0 {
			h.tl.note("cut-mid-frame: no device online")
		}
	case "poison":
		h.poison(ctx)
	}
}

// startAgain retries a server's start until it works (a port taken for a
// moment, a slow machine), for up to a minute; the verdict's recovery wait
// reports a server that stayed down.
func (h *harness) startAgain(name string, start func() error) {
	for i := 0; i < 60; i++ {
		err := start()
		if err == nil || strings.Contains(err.Error(), "already running") {
			return
		}
		h.tl.note(fmt.Sprintf("%s start failed (attempt %d): %v", name, i+1, err))
		time.Sleep(time.Second)
	}
}

// redisWipe kills redis-server and starts it empty: every projection must
// rebuild from the topics.
func (h *harness) redisWipe(ctx context.Context, down time.Duration) {
	h.watch.wipeBegins()
	h.tl.fault("redis-wipe", "redis", "killed, started again with no data", down)
	h.c.redisSrv.Kill()
	time.Sleep(down)
	h.startAgain("redis", h.c.redisSrv.Start)
	// Every ack made before the wipe is below these ends: once the ack
	// projector has saved them, the cursors are whole again.
	for {
		ends, err := h.c.endOffsets(ctx, topics.Acks)
		if err == nil {
			h.watch.wipeEnds(ends)
			return
		}
		if ctx.Err() != nil {
			h.watch.wipeEnds(nil)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pickDevice returns a random device, preferably online (or offline).
func (h *harness) pickDevice(online bool) *device {
	perm := rand.Perm(len(h.devices))
	for _, i := range perm {
		if h.devices[i].online.Load() == online {
			return h.devices[i]
		}
	}
	return h.devices[perm[0]]
}

// poison writes one undecodable record to every topic, keyed like a real
// record of a group of the run, so it sits in a partition in use.
func (h *harness) poison(ctx context.Context) {
	gid := h.w.gids[rand.IntN(len(h.w.gids))]
	uid := h.w.members[gid][0]
	wrongKind := schema.AppendMessage(nil, &schema.Message{Gid: gid, Sender: uid})
	for _, p := range []struct {
		topic string
		key   []byte
		value []byte
	}{
		{topics.Messages, schema.MessageKey(gid), []byte{0xff, 0xfe, 0x00}},
		{topics.Acks, schema.MemberKey(gid, uid), []byte("garbage")},
		{topics.Receipts, schema.MemberKey(gid, uid), []byte{9, 3, 0}}, // unknown version
		{topics.Members, schema.MemberKey(gid, uid), wrongKind},
	} {
		part := topics.Partition(gid, h.c.partitions)
		client := h.c.client(5 * time.Second)
		for attempt := 0; ; attempt++ {
			resp, err := client.Produce(ctx, &kafka.ProduceRequest{Topic: p.topic, Partition: part, RequiredAcks: kafka.RequireAll,
				Records: kafka.NewRecordReader(kafka.Record{Key: kafka.NewBytes(p.key), Value: kafka.NewBytes(p.value)})})
			if err == nil && resp.Error == nil {
				h.poisonMu.Lock()
				h.poisoned = append(h.poisoned, poisonRec{Topic: p.topic, Partition: part, Offset: resp.BaseOffset})
				h.poisonMu.Unlock()
				h.tl.fault("poison", p.topic, fmt.Sprintf("partition %d offset %d", part, resp.BaseOffset), 0)
				break
			}
			if ctx.Err() != nil || attempt > 50 {
				h.tl.note(fmt.Sprintf("poison into %s not written: %v %v", p.topic, err, resp))
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
