package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

type rebuildOpts struct {
	force    bool
	batch    int
	parallel int
}

func rebuildFlags(c *command) any {
	o := &rebuildOpts{}
	c.fs.BoolVar(&o.force, "force", false, "rebuild although the projection's consumer group has active members")
	c.fs.IntVar(&o.batch, "batch", 50000, "records handed on at a time (member events: per Redis write)")
	c.fs.IntVar(&o.parallel, "parallel", 4, "partitions replayed at once")
	return o
}

// A rebuild wipes one projection's Redis state (its keys, found with SCAN,
// and its saved offsets) and replays its topic from the log start with the
// calls the live projector makes (see replay.records), saving the position
// next to the state after every write; the restarted projector goes on from
// there. The cursor projections also take the cursor raise of every join in
// chat.members, which the member projector applies live (a joiner starts at
// the group head). It ends with a consistency report: the state folded from
// the records against the state read back from Redis.
func rebuild(ctx context.Context, c *command, opts any, args []string) error {
	o := opts.(*rebuildOpts)
	if len(args) != 1 {
		return errors.New("usage: chatctl rebuild acks|receipts|members [-force]")
	}
	p := store.Projection(args[0])
	group, topic := "", ""
	switch p {
	case store.ProjectionAcks:
		group, topic = consumers.GroupAckProjector, topics.Acks
	case store.ProjectionReads:
		group, topic = consumers.GroupReceiptProjector, topics.Receipts
	case store.ProjectionMembers:
		group, topic = consumers.GroupMemberProjector, topics.Members
	default:
		return fmt.Errorf("unknown projection %q: want acks, receipts or members", args[0])
	}
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	a := newAdmin(brokers, c.s.kafkaSecurity)
	defer a.close()
	if err := checkInactive(ctx, a, group, o.force); err != nil {
		return err
	}
	if p != store.ProjectionMembers {
		// The member projector raises joiners' cursors in the same keys:
		// running, it races the wipe, and the report counts its raises as
		// unexpected. The projector role runs both; stop the role.
		if err := checkInactive(ctx, a, consumers.GroupMemberProjector, o.force); err != nil {
			return fmt.Errorf("rebuild %s also replays the joins of %s: %w", p, topics.Members, err)
		}
	}
	rds, closeRedis, err := c.s.redis(ctx)
	if err != nil {
		return err
	}
	defer closeRedis()

	spans, total, err := a.spans(ctx, topic, nil)
	if err != nil {
		return err
	}
	var joins []span
	if p != store.ProjectionMembers {
		var n int64
		if joins, n, err = a.spans(ctx, topics.Members, nil); err != nil {
			return err
		}
		total += n
	}
	// The wipe and the check each walk every key of Redis (SCAN), with
	// no count to show: say what is being done, or a large keyspace
	// looks like a hang.
	fmt.Fprintf(c.stderr, "wiping %s: scanning every key of Redis for its own…\n", p)
	deleted, err := rds.Wipe(ctx, p, group)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "wiped %s: %d keys (with %s's saved offsets)\n", p, deleted, group)
	// Cut short from here, the projection is partly rebuilt: a projector
	// started on it would not replay the joins' cursor raises.
	partly := func(err error) error {
		return fmt.Errorf("%w; %s is wiped and only partly rebuilt: run `chatctl rebuild %s` again before starting %s", err, p, p, group)
	}

	r := &replay{rds: rds, partitions: len(spans), expect: newExpectation(p)}
	if p != store.ProjectionMembers {
		if r.prod, err = producers.New(producers.Config{Brokers: brokers, Security: c.s.kafkaSecurity}); err != nil {
			return partly(err)
		}
		defer r.prod.Close()
	}
	prog := newProgress(c.stderr, "rebuild "+string(p), total)
	cfg := scanConfig{brokers: brokers, sec: c.s.kafkaSecurity, batch: o.batch, parallel: o.parallel, onRecords: prog.add}
	var joinRecords int64 // of chat.members, read for the joins' raises
	if len(joins) > 0 {
		cfg.topic = topics.Members
		cfg.onSkip = skipNotice(c.stderr, topics.Members, "the rebuilt "+string(p))
		if err := scan(ctx, cfg, joins, r.joins(p)); err != nil {
			prog.finish()
			return partly(fmt.Errorf("replaying the joins of %s: %w", topics.Members, err))
		}
		joinRecords = prog.records.Load()
	}
	cfg.topic = topic
	cfg.onSkip = skipNotice(c.stderr, topic, "the rebuilt "+string(p))
	if p != store.ProjectionMembers {
		cfg.spanDone = r.finishCursors(p, group, topic)
	}
	err = scan(ctx, cfg, spans, r.records(p, group, topic))
	records, took := prog.finish()
	if err != nil {
		return partly(fmt.Errorf("replaying %s: %w", topic, err))
	}
	ends := map[int]int64{}
	for _, s := range spans {
		ends[s.part] = s.to
	}
	if err := rds.SaveOffsets(ctx, group, topic, ends); err != nil {
		return partly(err)
	}
	if err := a.commit(ctx, group, topic, ends); err != nil && !o.force {
		return err
	}
	of := ""
	if len(joins) > 0 {
		of = fmt.Sprintf(" of %s and %d of %s (its joins raise cursors)", topic, joinRecords, topics.Members)
	}
	fmt.Fprintf(c.stdout, "replayed %d records%s in %v (%.0f records/s); %d did not decode or lay misfiled (the live consumer dead-letters them)\n",
		records-joinRecords, of, took.Round(time.Millisecond), float64(records)/took.Seconds(), r.poison.Load())
	if n := r.corrected.Load(); n > 0 {
		fmt.Fprintf(c.stdout, "appended %d cursors to %s whose last record was below them, so that compaction keeps them\n", n, topic)
	}
	fmt.Fprintf(c.stderr, "checking the rebuilt %s against the topic: scanning every key of Redis…\n", p)
	rep, err := r.expect.check(ctx, rds)
	if err != nil {
		return err
	}
	fmt.Fprint(c.stdout, rep)
	if !rep.ok() {
		return fmt.Errorf("the rebuilt %s differ from the topic; is a %s consumer still running? stop it and rebuild again", p, group)
	}
	// The state holds every record up to the saved positions, as the
	// projector marks it once it has caught up: the gateways answer on it
	// from now, not only once the projector runs again.
	for part := range ends {
		if _, err := rds.MarkReplayed(ctx, group, topic, part); err != nil {
			return fmt.Errorf("%w; the gateways answer unavailable on what it holds until %s runs again and marks it", err, group)
		}
	}
	next := fmt.Sprintf("start %s to apply what %s gets from here", group, topic)
	if o.force {
		next = fmt.Sprintf("a running %s goes on from here (it logs that its saved position moved)", group)
	}
	fmt.Fprintf(c.stdout, "marked %s ready: the gateways answer on it now; %s\n", p, next)
	return nil
}

// replay applies records to Redis and folds what the state must be.
type replay struct {
	rds        *store.Redis
	partitions int                 // of the topics replayed (co-partitioned)
	prod       *producers.Producer // cursor projections: appends the cursors the log left behind
	expect     *expectation
	poison     counter
	corrected  counter
}

// joins returns the scan function that folds the cursor raise of every
// join; flushCursors writes them with the cursor records of the partition.
// A leaving of a member no earlier record names is their join, at the
// position it names, as the member projector applies it (what compaction
// leaves of a removal that failed after its leaving).
func (r *replay) joins(p store.Projection) func(context.Context, int, []kafka.Message) error {
	return func(ctx context.Context, part int, msgs []kafka.Message) error {
		f := r.expect.fold(part)
		for i := range msgs {
			ev, err := decode(&msgs[i], part, r.partitions, schema.DecodeMember)
			if err != nil {
				continue
			}
			switch {
			case ev.Op == schema.OpJoin:
				f.addJoin(ev.Gid, ev.Uid, ev.Pos)
			case ev.Op == schema.OpLeaving && ev.HasJoined && !f.named(ev.Gid, ev.Uid):
				f.addJoin(ev.Gid, ev.Uid, ev.Joined)
			case ev.Op == schema.OpLeave:
				f.name(ev.Gid, ev.Uid)
			}
		}
		return nil
	}
}

// records returns the scan function for the projection's own topic.
//
// Cursor records are folded per partition (a cursor keeps its maximum, so
// only the last value of each member needs writing) and written with the
// store's AdvanceAcks or AdvanceReads, the calls the projectors make, when
// the fold holds flushAbove unwritten cursors and at the span's end; the
// position is saved after each write. Member events go through the member
// projector's Handle batch by batch, in offset order, since their order
// matters.
func (r *replay) records(p store.Projection, group, topic string) func(context.Context, int, []kafka.Message) error {
	switch p {
	case store.ProjectionAcks, store.ProjectionReads:
		flush := r.flushCursors(p, group, topic)
		return func(ctx context.Context, part int, msgs []kafka.Message) error {
			f := r.expect.fold(part)
			for i := range msgs {
				var gid, uid string
				var upto int64
				if p == store.ProjectionAcks {
					e, err := decode(&msgs[i], part, r.partitions, schema.DecodeAck)
					if err != nil {
						r.poison.Add(1)
						continue
					}
					gid, uid, upto = e.Gid, e.Uid, e.Upto
				} else {
					e, err := decode(&msgs[i], part, r.partitions, schema.DecodeReceipt)
					if err != nil {
						r.poison.Add(1)
						continue
					}
					gid, uid, upto = e.Gid, e.Uid, e.Upto
				}
				f.add(gid, uid, upto)
			}
			f.next = msgs[len(msgs)-1].Offset + 1
			if f.dirty >= flushAbove {
				return flush(ctx, part)
			}
			return nil
		}
	default:
		h := &consumers.MemberProjector{Redis: r.rds}
		return func(ctx context.Context, part int, msgs []kafka.Message) error {
			recs := decodeAll(msgs, part, r.partitions, schema.DecodeMember, &r.poison)
			r.expect.memberRecords(len(recs), func(i int) schema.Member { return recs[i].Event })
			if err := h.Handle(ctx, part, recs); err != nil {
				return err
			}
			return r.rds.SaveOffsets(ctx, group, topic, map[int]int64{part: msgs[len(msgs)-1].Offset + 1})
		}
	}
}

// flushAbove is how many unwritten cursors a partition's fold holds before
// they are written.
const flushAbove = 1 << 20

// flushCursors writes a partition's unwritten cursors, then saves its
// position (when it has read records of the projection's topic).
func (r *replay) flushCursors(p store.Projection, group, topic string) func(ctx context.Context, part int) error {
	return func(ctx context.Context, part int) error {
		f := r.expect.fold(part)
		err := f.flush(func(acks []schema.Ack) error {
			if p == store.ProjectionAcks {
				return r.rds.AdvanceAcks(ctx, acks)
			}
			rs := make([]schema.Receipt, len(acks))
			for i, a := range acks {
				rs[i] = schema.Receipt(a)
			}
			return r.rds.AdvanceReads(ctx, rs)
		})
		if err != nil || f.next == 0 {
			return err
		}
		return r.rds.SaveOffsets(ctx, group, topic, map[int]int64{part: f.next})
	}
}

// finishCursors ends a partition of a cursor projection: it writes the
// cursors still unwritten, appends again each cursor whose member's last
// record is below it (two devices acking 100 and then 90 leave 90 last, and
// a compacted topic keeps only that), as the live projectors do, and then
// saves the position.
func (r *replay) finishCursors(p store.Projection, group, topic string) func(ctx context.Context, part int) error {
	flush := r.flushCursors(p, group, topic)
	return func(ctx context.Context, part int) error {
		f := r.expect.fold(part)
		behind := f.behind()
		if len(behind) > 0 {
			at := time.Now().UnixMilli()
			var err error
			if p == store.ProjectionAcks {
				for i := range behind {
					behind[i].At = at
				}
				err = r.prod.SendAcks(ctx, behind...)
			} else {
				rs := make([]schema.Receipt, len(behind))
				for i, a := range behind {
					rs[i] = schema.Receipt{Gid: a.Gid, Uid: a.Uid, Upto: a.Upto, At: at}
				}
				err = r.prod.SendReceipts(ctx, rs...)
			}
			if err != nil {
				return fmt.Errorf("append %d cursors the log left behind to %s: %w", len(behind), topic, err)
			}
			r.corrected.Add(int64(len(behind)))
		}
		return flush(ctx, part)
	}
}

// decode decodes the value of m (dec), of partition part of a topic of
// partitions partitions, refusing a record that is misfiled as the live
// consumers do (consumers.Misfiled), so that what chatctl builds from the
// topics is what they build.
func decode[E any](m *kafka.Message, part, partitions int, dec func([]byte) (E, error)) (E, error) {
	e, err := dec(m.Value)
	if err == nil {
		err = consumers.Misfiled(&e, m.Key, part, partitions)
	}
	return e, err
}

// decodeAll decodes msgs of partition part (decode), counting and skipping
// the ones that do not.
func decodeAll[E any](msgs []kafka.Message, part, partitions int, dec func([]byte) (E, error), poison *counter) []consumers.Record[E] {
	recs := make([]consumers.Record[E], 0, len(msgs))
	for i := range msgs {
		e, err := decode(&msgs[i], part, partitions, dec)
		if err != nil {
			poison.Add(1)
			continue
		}
		recs = append(recs, consumers.Record[E]{Partition: msgs[i].Partition, Offset: msgs[i].Offset, Time: msgs[i].Time, Event: e})
	}
	return recs
}

// counter is a mutex-guarded count (scans run one goroutine per partition).
type counter struct {
	mu sync.Mutex
	n  int64
}

func (c *counter) Add(n int64) { c.mu.Lock(); c.n += n; c.mu.Unlock() }
func (c *counter) Load() int64 { c.mu.Lock(); defer c.mu.Unlock(); return c.n }
