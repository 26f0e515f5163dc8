package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/flags"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

type backfillOpts struct {
	tables   string
	batch    int
	parallel int
	dedup    time.Duration
}

func backfillFlags(c *command) any {
	o := &backfillOpts{}
	c.fs.StringVar(&o.tables, "tables", "messages,acks,receipts,members", "what to fill: messages (from chat.messages), acks (ack_events, ack_cursors), receipts (receipt_events, read_cursors), members (member_events)")
	c.fs.IntVar(&o.batch, "batch", 100000, "rows per ClickHouse insert")
	c.fs.IntVar(&o.parallel, "parallel", 2, "partitions read at once")
	c.fs.DurationVar(&o.dedup, "dedup-window", 24*time.Hour, "how far apart two sends with one client_msg_id may be for the later to be a duplicate (the persister's window)")
	return o
}

// backfill fills the ClickHouse tables from whatever the topics still
// hold, with the same rows the persister and the projectors write: every
// row carries its Kafka identity in its ReplacingMergeTree key, so a
// second run (or a run over rows the live consumers already wrote) adds
// only copies that every query collapses. Duplicate sends are dropped as
// the persister drops them.
func backfill(ctx context.Context, c *command, opts any, args []string) error {
	o := opts.(*backfillOpts)
	if err := noArgs(c, args); err != nil {
		return err
	}
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	want := map[string]string{"messages": topics.Messages, "acks": topics.Acks, "receipts": topics.Receipts, "members": topics.Members}
	var todo []string
	for _, t := range list(o.tables) {
		if _, ok := want[t]; !ok {
			return fmt.Errorf("-tables: unknown %q; want some of messages, acks, receipts, members", t)
		}
		todo = append(todo, t)
	}
	if len(todo) == 0 {
		return fmt.Errorf("-tables %q: name at least one of messages, acks, receipts, members (the default is all four)", o.tables)
	}
	if o.dedup < time.Millisecond {
		// The persister refuses such a window: with it, every resend would
		// be written as a message of its own.
		return fmt.Errorf("-dedup-window %v: want the persister's dedup window (24h unless its store was set otherwise), at least 1ms", o.dedup)
	}
	ch, err := c.s.clickhouse(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	a := newAdmin(brokers, c.s.kafkaSecurity)
	defer a.close()
	for i, t := range todo {
		topic := want[t]
		spans, total, err := a.spans(ctx, topic, nil)
		if err != nil {
			return fmt.Errorf("backfill %s: %w; %s", t, err, goOn(c, todo[:i], todo[i:]))
		}
		prog := newProgress(c.stderr, "backfill "+t, total)
		fill := filler(ch, t, len(spans), o.dedup, c.stderr)
		err = scan(ctx, scanConfig{brokers: brokers, sec: c.s.kafkaSecurity, topic: topic, batch: o.batch, parallel: o.parallel, onRecords: prog.add,
			onSkip: skipNotice(c.stderr, topic, "ClickHouse")}, spans, fill.batch)
		records, took := prog.finish()
		if err != nil {
			return fmt.Errorf("backfill %s from %s: %w; %s", t, topic, err, goOn(c, todo[:i], todo[i:]))
		}
		fmt.Fprintf(c.stdout, "backfill %s: %d records of %s in %v (%.0f records/s): %d rows written, %d duplicate sends dropped, %d did not decode or lay misfiled\n",
			t, records, topic, took.Round(time.Millisecond), float64(records)/took.Seconds(), fill.rows.Load(), fill.dups.Load(), fill.poison.Load())
	}
	return nil
}

// goOn says how to go on with a backfill cut short (Ctrl-C, a store that
// stayed down) after the tables done were filled: with the rest only, so
// that a long run does not start over, and the other flags as they were
// set (a -dedup-window other than the persister's would write resends as
// messages), quoted for a shell. Secrets are left out of the command,
// which ends up in logs: it says to give them again. Rows written again
// are copies that every query collapses, so the table cut short is simply
// filled again.
func goOn(c *command, done, rest []string) string {
	args := []string{"-tables", shellQuote(strings.Join(rest, ","))}
	var again []string
	c.fs.Visit(func(f *flag.Flag) {
		switch {
		case f.Name == "tables":
		case flags.Secret(f.Name): // logs and scrollback keep what is printed
			again = append(again, fmt.Sprintf("-%s (or %s)", f.Name, envOf(f.Name)))
		default:
			// -name=value: a bool flag takes no separate value.
			args = append(args, "-"+f.Name+"="+shellQuote(f.Value.String()))
		}
	})
	next := fmt.Sprintf("go on with `chatctl backfill %s` (rows written again are harmless)", strings.Join(args, " "))
	if len(again) > 0 {
		next += fmt.Sprintf("; it leaves the secrets out, give them again: %s", strings.Join(again, ", "))
	}
	if len(done) == 0 {
		return next
	}
	return fmt.Sprintf("%s filled already; %s", strings.Join(done, ", "), next)
}

// shellQuote returns s as one word of a POSIX shell: as it is when it
// holds nothing the shell would read otherwise, else in single quotes.
func shellQuote(s string) string {
	plain := s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == ""
	if plain {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// fill writes one table's rows from batches of records.
type fill struct {
	batch              func(ctx context.Context, part int, msgs []kafka.Message) error
	rows, dups, poison counter
}

// filler returns the fill of table from a topic of partitions partitions.
func filler(ch *store.ClickHouse, table string, partitions int, dedupWin time.Duration, stderr io.Writer) *fill {
	f := &fill{}
	retry := func(ctx context.Context, part int, what string, do func() error) error {
		return retrying(ctx, insertAttempts, time.Second, do, func(attempt int, wait time.Duration, err error) {
			fmt.Fprintf(stderr, "backfill %s: partition %d: %s failed (%v); trying again in %v (attempt %d of %d)\n",
				table, part, what, err, wait, attempt+1, insertAttempts)
		})
	}
	switch table {
	case "messages":
		claims := newClaims(dedupWin)
		f.batch = func(ctx context.Context, part int, msgs []kafka.Message) error {
			all := make([]schema.Message, 0, len(msgs))
			for i := range msgs {
				m, err := decode(&msgs[i], part, partitions, schema.DecodeMessage)
				if err != nil {
					f.poison.Add(1)
					continue
				}
				m.MsgID = msgs[i].Offset
				all = append(all, m)
			}
			err := retry(ctx, part, "the look-up of first sends", func() error {
				return claims.claimOriginals(ctx, ch, part, msgs[0].Offset, all)
			})
			if err != nil {
				return err
			}
			keep, pc := all[:0], claims.part(part)
			for i := range all {
				if pc.dup(&all[i], claims.win) {
					f.dups.Add(1)
					continue
				}
				keep = append(keep, all[i])
			}
			f.rows.Add(int64(len(keep)))
			return retry(ctx, part, "the insert", func() error { return ch.InsertMessages(ctx, int32(part), keep) })
		}
	case "acks":
		f.batch = func(ctx context.Context, part int, msgs []kafka.Message) error {
			rows := make([]store.AckRow, 0, len(msgs))
			for i := range msgs {
				e, err := decode(&msgs[i], part, partitions, schema.DecodeAck)
				if err != nil {
					f.poison.Add(1)
					continue
				}
				rows = append(rows, store.AckRow{Ack: e, Partition: int32(part), Offset: msgs[i].Offset})
			}
			f.rows.Add(int64(len(rows)))
			return retry(ctx, part, "the insert", func() error { return ch.InsertAcks(ctx, rows) })
		}
	case "receipts":
		f.batch = func(ctx context.Context, part int, msgs []kafka.Message) error {
			rows := make([]store.ReceiptRow, 0, len(msgs))
			for i := range msgs {
				e, err := decode(&msgs[i], part, partitions, schema.DecodeReceipt)
				if err != nil {
					f.poison.Add(1)
					continue
				}
				rows = append(rows, store.ReceiptRow{Receipt: e, Partition: int32(part), Offset: msgs[i].Offset})
			}
			f.rows.Add(int64(len(rows)))
			return retry(ctx, part, "the insert", func() error { return ch.InsertReceipts(ctx, rows) })
		}
	case "members":
		f.batch = func(ctx context.Context, part int, msgs []kafka.Message) error {
			rows := make([]store.MemberRow, 0, len(msgs))
			for i := range msgs {
				e, err := decode(&msgs[i], part, partitions, schema.DecodeMember)
				if err != nil {
					f.poison.Add(1)
					continue
				}
				if e.Op == schema.OpLeaving {
					continue // announces a leave; no membership change
				}
				rows = append(rows, store.MemberRow{Member: e, Partition: int32(part), Offset: msgs[i].Offset})
			}
			f.rows.Add(int64(len(rows)))
			return retry(ctx, part, "the insert", func() error { return ch.InsertMembers(ctx, rows) })
		}
	}
	return f
}

// insertAttempts is how many times the backfill tries one batch's
// ClickHouse work before it gives up: writing rows again is harmless, and
// one dropped connection should not end a backfill that has run for an hour.
const insertAttempts = 5

// retrying calls do until it succeeds, at most attempts times, waiting
// first wait and then twice as long after each failure (told to failed).
// It returns do's last error, or ctx's if it ends first.
func retrying(ctx context.Context, attempts int, wait time.Duration, do func() error, failed func(attempt int, wait time.Duration, err error)) error {
	for attempt := 1; ; attempt++ {
		err := do()
		if err == nil || attempt >= attempts || ctx.Err() != nil {
			return err
		}
		failed(attempt, wait, err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// claims decides duplicate sends in offset order, per partition, as the
// persister's claims in Redis do: a message with the (gid, sender,
// client_msg_id) of an earlier kept message whose sent_at is at most the
// window apart is a duplicate; otherwise it is kept and becomes the claim.
// Every group lives in one partition, so partitions are independent.
type claims struct {
	win  int64
	mu   counter // guards parts
	byPt map[int]*partClaims
}

type partClaims struct {
	last   map[claimKey]claim
	newest int64 // highest sent_at seen, for eviction
	limit  int   // evict when last grows past this
	// The partition's first offset read and the sent_at of its first
	// message: a message within the window of it may be the resend of one
	// that retention removed before the backfill could claim it.
	started      bool
	start, first int64
}

type claim struct{ msgid, sentAt int64 } // sentAt clamped as the persister's claims (store.ClaimSentAt)

// claimKey is what a send is deduplicated by. A struct of the decoded
// strings, not their concatenation: no allocation per message.
type claimKey struct{ gid, sender, cmid string }

// evictAbove is the claim count past which claims older than twice the
// window (by sent_at) are dropped.
const evictAbove = 1 << 20

func newClaims(win time.Duration) *claims {
	return &claims{win: win.Milliseconds(), byPt: map[int]*partClaims{}}
}

func (c *claims) part(p int) *partClaims {
	c.mu.mu.Lock()
	defer c.mu.mu.Unlock()
	pc := c.byPt[p]
	if pc == nil {
		pc = &partClaims{last: make(map[claimKey]claim, 1<<16), limit: evictAbove}
		c.byPt[p] = pc
	}
	return pc
}

// dup reports whether m is a duplicate send within win (ms) of its claim;
// if not, m becomes its key's claim. It is called from the one goroutine
// that reads the partition.
func (pc *partClaims) dup(m *schema.Message, win int64) bool {
	if m.ClientMsgID == "" {
		return false
	}
	key := claimKey{m.Gid, m.Sender, m.ClientMsgID}
	if cl, ok := pc.last[key]; ok && cl.msgid < m.MsgID && store.SameSend(m.SentAt, cl.sentAt, win) {
		return true
	}
	pc.last[key] = claim{m.MsgID, store.ClaimSentAt(m.SentAt)}
	pc.newest = max(pc.newest, store.ClaimSentAt(m.SentAt))
	if len(pc.last) > pc.limit {
		for k, cl := range pc.last {
			if cl.sentAt < pc.newest-2*win {
				delete(pc.last, k)
			}
		}
		pc.limit = max(evictAbove, 2*len(pc.last))
	}
	return false
}

// claimOriginals claims, before dup decides msgs (one batch of partition
// part), the first sends of resends among them that are stored in
// ClickHouse but no longer in the topic: retention removed them before the
// backfill began at offset from. As the persister's ClaimOriginals does, a
// key gets the highest msgid found, unless it holds a claim already (a
// send the backfill read is later than any of them). So a resend within
// the window of its first send is a duplicate and leaves the first send
// the claim. Only messages sent within the window of the partition's first
// message can be such resends; the rest of a backfill costs nothing here.
func (c *claims) claimOriginals(ctx context.Context, ch *store.ClickHouse, part int, from int64, msgs []schema.Message) error {
	pc := c.part(part)
	if !pc.started && len(msgs) > 0 {
		pc.started, pc.start, pc.first = true, from, msgs[0].SentAt
	}
	if pc.start <= 0 {
		return nil // the topic still holds the partition's first record
	}
	found, err := ch.FirstSendsBefore(ctx, int32(part), pc.start, pc.first, c.win, msgs)
	if err != nil {
		return err
	}
	for _, m := range found {
		k := claimKey{m.Gid, m.Sender, m.ClientMsgID}
		if cl, ok := pc.last[k]; !ok || (cl.msgid < pc.start && cl.msgid < m.MsgID) {
			pc.last[k] = claim{m.MsgID, store.ClaimSentAt(m.SentAt)}
			pc.newest = max(pc.newest, store.ClaimSentAt(m.SentAt))
		}
	}
	return nil
}
