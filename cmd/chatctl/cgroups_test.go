package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// chQueries are ClickHouse queries that are exact under replayed rows (the
// forms docs/analytics.md uses), rendered as text for comparison.
func chQueries(t *testing.T, ch *store.ClickHouse, gids []string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, gid := range gids {
		ms, err := ch.Messages(ctx, gid, -1, math.MaxInt64, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, m := range ms {
			fmt.Fprintf(&b, "%d/%s/%s/%d/%s ", m.MsgID, m.Sender, m.ClientMsgID, m.SentAt, m.Body)
		}
		out[gid+" messages"] = b.String()
		n, err := ch.CountMessages(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		out[gid+" count"] = fmt.Sprint(n)
	}
	for name, q := range map[string]string{
		"per group": "SELECT gid, uniqExact(msgid), min(msgid), max(msgid), min(sent_at_ms) FROM messages GROUP BY gid ORDER BY gid",
		"acks":      "SELECT gid, uid, max(upto) FROM ack_cursors GROUP BY gid, uid ORDER BY gid, uid",
		"ack log":   "SELECT gid, uniqExact(`partition`, `offset`), max(upto) FROM ack_events GROUP BY gid ORDER BY gid",
		"reads":     "SELECT gid, uid, max(upto) FROM read_cursors GROUP BY gid, uid ORDER BY gid, uid",
		"receipts":  "SELECT gid, uniqExact(`partition`, `offset`), max(upto) FROM receipt_events GROUP BY gid ORDER BY gid",
		"members":   "SELECT gid, uid, argMax(op, `offset`), argMax(pos, `offset`), uniqExact(`offset`) FROM member_events GROUP BY gid, uid ORDER BY gid, uid",
	} {
		rows, err := ch.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		cols := rows.ColumnTypes()
		for rows.Next() {
			vals := make([]any, len(cols))
			for i, c := range cols {
				vals[i] = newOf(c.ScanType())
			}
			if err := rows.Scan(vals...); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, fmt.Sprint(deref(vals)...))
		}
		rows.Close()
		out[name] = strings.Join(lines, "\n")
	}
	return out
}

func TestResetOfAStoppedGroupReplaysFromATime(t *testing.T) {
	e := newEnv(t, 4)
	ch := e.withClickHouse("reset")
	ctx := context.Background()
	p := &consumers.Persister{Redis: e.rds, ClickHouse: ch}
	r, err := p.Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	stop := e.start(r)

	// Two hours of messages: the first hour's before the reset time, the
	// second's after it, with a resend that the persister must keep out.
	now := time.Now()
	resetAt := now.Add(-90 * time.Minute)
	var gids []string
	var sent, after int64
	for g := range 6 {
		gid := fmt.Sprintf("g%d", g)
		gids = append(gids, gid)
		for i := range 20 {
			at := now.Add(-2 * time.Hour).Add(time.Duration(i) * time.Minute)
			if i >= 10 {
				at = now.Add(-time.Hour).Add(time.Duration(i) * time.Minute)
				after++
			}
			m := schema.Message{Gid: gid, Sender: "u1", ClientMsgID: fmt.Sprintf("%s-%d", gid, i), SentAt: at.UnixMilli(), Body: []byte("b")}
			if _, err := e.prod.SendMessage(ctx, &m); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		resend := schema.Message{Gid: gid, Sender: "u1", ClientMsgID: gid + "-15", SentAt: now.Add(-time.Hour).Add(16 * time.Minute).UnixMilli(), Body: []byte("b")}
		if _, err := e.prod.SendMessage(ctx, &resend); err != nil {
			t.Fatal(err)
		}
		sent++
		after++
	}
	e.waitFor("the persister to store every message", func() bool { return r.CaughtUp() && r.Stats().Records >= sent })
	before := chQueries(t, ch, gids)
	if before["g0 count"] != "20" {
		t.Fatalf("ClickHouse holds %s messages of g0, want 20 (the resend dropped)", before["g0 count"])
	}
	to := resetAt.UTC().Format(time.RFC3339)

	// Refused while the persister runs; its plan is not.
	if _, err := e.ctl("consumer-groups", "reset", consumers.GroupPersister, "-to", to); !errors.Is(err, ErrGroupActive) {
		t.Fatalf("reset of a running group: %v, want ErrGroupActive", err)
	}
	if out, err := e.ctl("consumer-groups", "reset", consumers.GroupPersister, "-to", to, "-dry-run"); err != nil || !strings.Contains(out, "dry run: nothing changed") || !strings.Contains(out, "stop its consumers") {
		t.Fatalf("the plan of a reset of a running group: %v\n%s\nwant the plan, and that its consumers must stop first", err, out)
	}
	stop()
	e.waitGroupEmpty(consumers.GroupPersister)

	a := newAdmin(e.brokers, topics.Security{})
	parts, err := a.partitions(ctx, topics.Messages)
	if err != nil {
		t.Fatal(err)
	}
	positions := func() string {
		com, err := a.committed(ctx, consumers.GroupPersister, topics.Messages, parts)
		if err != nil {
			t.Fatal(err)
		}
		saved, err := e.rds.Offsets(ctx, consumers.GroupPersister, topics.Messages)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint("committed ", com, " saved ", saved)
	}
	was := positions()

	// A dry run prints the plan and changes nothing.
	out := e.mustCtl("consumer-groups", "reset", consumers.GroupPersister, "-to", to, "-dry-run")
	if !strings.Contains(out, "dry run: nothing changed") || !strings.Contains(out, "NEW") {
		t.Fatalf("dry run printed:\n%s", out)
	}
	if now := positions(); now != was {
		t.Fatalf("a dry run moved the group: %s, was %s", now, was)
	}

	// The reset moves both positions to the first record at or after the
	// time; the persister re-reads exactly the records from there.
	e.mustCtl("consumer-groups", "reset", consumers.GroupPersister, "-to", to)
	want, err := a.offsetsAt(ctx, topics.Messages, parts, resetAt)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := e.rds.Offsets(ctx, consumers.GroupPersister, topics.Messages)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(saved) != fmt.Sprint(want) {
		t.Fatalf("after the reset the persister's saved position is %v, want %v", saved, want)
	}
	list := e.mustCtl("consumer-groups", "list", consumers.GroupPersister)
	b, err := a.bounds(ctx, topics.Messages, parts)
	if err != nil {
		t.Fatal(err)
	}
	var replay int64 // records from the reset position on: a partition's log is in offset order, not time order
	for _, p := range parts {
		replay += b[p].end - want[p]
		row := fmt.Sprintf("%s %d %d %d %d %d", topics.Messages, p, want[p], b[p].end, b[p].end-want[p], want[p])
		if !strings.Contains(strings.Join(strings.Fields(list), " "), row) {
			t.Fatalf("consumer-groups list does not show partition %d at %d with its lag:\n%s", p, want[p], list)
		}
	}
	r, err = p.Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	e.start(r)
	if replay < after {
		t.Fatalf("the reset positions %v cover %d records, fewer than the %d sent after %s", want, replay, after, to)
	}
	e.waitFor("the persister to re-read from the reset", func() bool { return r.CaughtUp() && r.Stats().Records >= replay })
	time.Sleep(200 * time.Millisecond)
	if n := r.Stats().Records; n != replay {
		t.Fatalf("the persister re-read %d records, want the %d from the reset positions %v", n, replay, want)
	}
	if d := diff(before, chQueries(t, ch, gids)); len(d) > 0 {
		t.Fatalf("the replay changed ClickHouse query results:\n%s", strings.Join(d, "\n"))
	}
}

func TestResetTargets(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	for i := range 10 {
		if _, err := e.prod.SendMessage(ctx, &schema.Message{Gid: "g", Sender: "u", SentAt: time.Now().UnixMilli(), Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	part := topics.Partition("g", 2)
	for to, want := range map[string]int64{"earliest": 0, "latest": 10, "4": 4, "99": 10} {
		out := e.mustCtl("consumer-groups", "reset", consumers.GroupFanout, "-to", to)
		com, err := newAdmin(e.brokers, topics.Security{}).committed(ctx, consumers.GroupFanout, topics.Messages, []int{part})
		if err != nil {
			t.Fatal(err)
		}
		if com[part] != want {
			t.Fatalf("-to %s: committed %d, want %d\n%s", to, com[part], want, out)
		}
	}
	e.mustCtl("consumer-groups", "reset", consumers.GroupFanout, "-to", "latest")
	all := strings.Join(strings.Fields(e.mustCtl("consumer-groups", "list")), " ")
	if !strings.Contains(all, fmt.Sprintf("chat.fanout Empty 0 chat.messages %d 10 10 0", part)) {
		t.Fatalf("consumer-groups list does not show chat.fanout at the end of its partition: %s", all)
	}
	// One partition alone: the other keeps its position.
	other := 1 - part
	e.mustCtl("consumer-groups", "reset", consumers.GroupFanout, "-to", "earliest")
	out := e.mustCtl("consumer-groups", "reset", consumers.GroupFanout, "-to", "3", "-partition", fmt.Sprint(part))
	com, err := newAdmin(e.brokers, topics.Security{}).committed(ctx, consumers.GroupFanout, topics.Messages, []int{0, 1})
	if err != nil || com[part] != 3 || com[other] != 0 {
		t.Fatalf("-to 3 -partition %d: committed %v (%v), want %d at 3 and %d left at 0\n%s", part, com, err, part, other, out)
	}
	if !strings.Contains(out, fmt.Sprintf("partition %d;", part)) {
		t.Errorf("the reset of one partition said:\n%s\nwant it named", out)
	}
	for _, bad := range []string{"2", "-2"} {
		if _, err := e.ctl("consumer-groups", "reset", consumers.GroupFanout, "-to", "3", "-partition", bad); err == nil || !strings.Contains(err.Error(), "partitions 0 to 1") {
			t.Fatalf("-partition %s of two: %v, want an error naming the partitions there are", bad, err)
		}
	}
	if _, err := e.ctl("consumer-groups", "reset", consumers.GroupFanout, "-to", "yesterday"); err == nil || !strings.Contains(err.Error(), "RFC") && !strings.Contains(err.Error(), "2024-05-01") {
		t.Fatalf("-to yesterday: %v, want an error showing the accepted forms", err)
	}
	// A group with offsets on two topics is reset on the one named.
	a := newAdmin(e.brokers, topics.Security{})
	for _, topic := range []string{topics.Messages, topics.Acks} {
		if err := a.commit(ctx, "someone.else", topic, map[int]int64{0: 0}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.ctl("consumer-groups", "reset", "someone.else", "-to", "earliest"); err == nil || !strings.Contains(err.Error(), "-topic") {
		t.Fatalf("reset of a group with offsets on two topics without -topic: %v, want it to ask for -topic", err)
	}
}

// -force resets a running group that keeps its position in Redis: the
// runner goes on from the new position, and the command says so rather
// than failing on the commit Kafka refuses from outside the group. A
// group whose position is in Kafka cannot be reset while it runs.
func TestForcedResetOfARunningGroup(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	for i := range 5 {
		if err := e.prod.SendAcks(ctx, schema.Ack{Gid: "g", Uid: fmt.Sprint("u", i), Upto: 1, At: 1}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := (&consumers.AckProjector{Redis: e.rds}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	e.start(r)
	e.waitFor("the ack projector to catch up", func() bool { return r.CaughtUp() && r.Stats().Records >= 5 })
	e.waitFor("its saved position", func() bool {
		o, err := e.rds.Offsets(ctx, consumers.GroupAckProjector, topics.Acks)
		return err == nil && o[0] == 5
	})
	if _, err := e.ctl("consumer-groups", "reset", consumers.GroupAckProjector, "-to", "earliest"); !errors.Is(err, ErrGroupActive) {
		t.Fatalf("reset of a running group without -force: %v, want ErrGroupActive", err)
	}
	out, err := e.ctl("consumer-groups", "reset", consumers.GroupAckProjector, "-to", "earliest", "-force")
	if err != nil || !strings.Contains(out, "running consumers go on from there") {
		t.Fatalf("reset -force of the running ack projector: %v\n%s", err, out)
	}
	e.waitFor("the projector to replay from the start", func() bool { return r.Stats().Records >= 10 })

	f, err := (&consumers.Fanout{Redis: e.rds}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	e.start(f)
	e.waitFor("the fan-out to hold its partitions", f.CaughtUp)
	// Unforced, the refusal names the role to stop and offers no -force,
	// which could not move it either.
	_, err = e.ctl("consumer-groups", "reset", consumers.GroupFanout, "-to", "latest", "-topic", topics.Messages)
	if !errors.Is(err, ErrGroupActive) || !strings.Contains(err.Error(), "chatd fanout") || strings.Contains(err.Error(), "or pass -force") {
		t.Fatalf("reset of the running fan-out: %v, want a refusal naming `chatd fanout`, offering no -force", err)
	}
	_, err = e.ctl("consumer-groups", "reset", consumers.GroupFanout, "-to", "latest", "-topic", topics.Messages, "-force")
	if !errors.Is(err, ErrGroupActive) || !strings.Contains(err.Error(), "keeps its position in Kafka") {
		t.Fatalf("reset -force of the running fan-out: %v, want a refusal saying why", err)
	}
}

// A reset to the log start replays as a start from nothing does: the
// persister claims again, from ClickHouse, the first sends that retention
// removed, so their resends stay duplicates once their claims in Redis
// have expired. Before, the reset saved the log start as a plain position
// and the replay stored such a resend as a second message.
func TestResetToTheLogStartKeepsResendsOfRemovedSendsOut(t *testing.T) {
	e := newEnv(t, 1)
	ch := e.withClickHouse("earliest")
	ctx := context.Background()
	rds, err := store.NewRedis(e.rc, store.RedisConfig{DedupWindow: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	persister := func() runner {
		r, err := (&consumers.Persister{Redis: rds, ClickHouse: ch}).Runner(e.base())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := persister()
	stop := e.start(r)
	now := time.Now().UnixMilli()
	orig := schema.Message{Gid: "g", Sender: "alice", ClientMsgID: "c1", SentAt: now, Body: []byte("hello")}
	resend := orig
	resend.SentAt = now + 1000
	other := schema.Message{Gid: "g", Sender: "bob", ClientMsgID: "c2", SentAt: now + 1500, Body: []byte("hi")}
	ids := e.sendMessages(orig, resend, other)
	e.waitFor("the persister to store the messages", func() bool { return r.CaughtUp() && r.Stats().Records >= 3 })
	if n, err := ch.CountMessages(ctx, "g"); err != nil || n != 2 {
		t.Fatalf("live: %d messages (%v), want 2 (the resend dropped)", n, err)
	}
	stop()
	e.waitGroupEmpty(consumers.GroupPersister)
	testserver.DeleteRecordsBefore(t, e.brokers, topics.Messages, 0, ids[1]) // retention removes the first send
	time.Sleep(3 * time.Second)                                              // the dedup window passes: the claims expire

	out := e.mustCtl("consumer-groups", "reset", consumers.GroupPersister, "-to", "earliest")
	r = persister()
	e.start(r)
	e.waitFor("the persister to replay from the log start", func() bool { return r.CaughtUp() && r.Stats().Records >= 2 })
	if n, err := ch.CountMessages(ctx, "g"); err != nil || n != 2 {
		ms, _ := ch.Messages(ctx, "g", -1, math.MaxInt64, 10)
		t.Fatalf("after the reset to earliest: %d messages (%v), want 2 (the resend dropped again):\n%+v\n%s", n, err, ms, out)
	}
}

// A reset names the group to move: a name the cluster does not know (no
// member, no committed offset) and that is none of chatd's is a typo, and
// the reset must say so rather than commit offsets for a new group and
// report success while the group meant stays where it was.
func TestResetOfAGroupNobodyKnowsIsRefused(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	if _, err := e.prod.SendMessage(ctx, &schema.Message{Gid: "g", Sender: "u", SentAt: time.Now().UnixMilli(), Body: []byte("b")}); err != nil {
		t.Fatal(err)
	}
	out, err := e.ctl("consumer-groups", "reset", "chat.fanuot", "-to", "latest", "-topic", topics.Messages)
	if err == nil || !strings.Contains(err.Error(), consumers.GroupFanout) {
		t.Fatalf("reset of a group nobody knows: %v, want a refusal naming chatd's groups\n%s", err, out)
	}
	// Without -topic too: it has offsets on no topic because it is unknown.
	out, err = e.ctl("consumer-groups", "reset", "chat.persistr", "-to", "latest")
	if err == nil || !strings.Contains(err.Error(), "unknown") || !strings.Contains(err.Error(), consumers.GroupPersister) {
		t.Fatalf("reset of a group nobody knows, without -topic: %v, want a refusal saying it is unknown and naming chatd's groups\n%s", err, out)
	}
	// A list of it would show an empty group, which reads as the
	// "MEMBERS 0" that a reset waits for.
	out, err = e.ctl("consumer-groups", "list", "chat.persistr")
	if err == nil || !strings.Contains(err.Error(), "unknown") || !strings.Contains(err.Error(), consumers.GroupPersister) {
		t.Fatalf("list of a group nobody knows: %v, want a refusal saying it is unknown and naming chatd's groups\n%s", err, out)
	}
	// chatd's groups list before they ever ran.
	if out := e.mustCtl("consumer-groups", "list", consumers.GroupPersister); !strings.Contains(out, consumers.GroupPersister) {
		t.Fatalf("list of the persister before it ran:\n%s", out)
	}
	if names, err := newAdmin(e.brokers, topics.Security{}).groups(ctx); err != nil || len(names) != 0 {
		t.Fatalf("the cluster's groups after the refused reset: %v (%v), want none", names, err)
	}
	// A group the cluster knows by its offsets is reset as before.
	if err := newAdmin(e.brokers, topics.Security{}).commit(ctx, "analytics", topics.Messages, map[int]int64{0: 0}); err != nil {
		t.Fatal(err)
	}
	e.mustCtl("consumer-groups", "reset", "analytics", "-to", "latest", "-topic", topics.Messages)
	if out := e.mustCtl("consumer-groups", "list", "analytics"); !strings.Contains(out, "analytics") {
		t.Fatalf("list of analytics, which has offsets:\n%s", out)
	}
	if com, err := newAdmin(e.brokers, topics.Security{}).committed(ctx, "analytics", topics.Messages, []int{0}); err != nil || com[0] != 1 {
		t.Fatalf("analytics after its reset to latest: %v (%v), want offset 1", com, err)
	}
}

// chatd's groups each read one topic: a reset of one of them on another
// topic moves nothing it reads, and must be refused, naming its topic.
func TestResetOfAChatdGroupOnAnotherTopicIsRefused(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	if err := e.prod.SendAcks(ctx, schema.Ack{Gid: "g", Uid: "u", Upto: 1, At: 1}); err != nil {
		t.Fatal(err)
	}
	out, err := e.ctl("consumer-groups", "reset", consumers.GroupPersister, "-to", "latest", "-topic", topics.Acks)
	if err == nil || !strings.Contains(err.Error(), topics.Messages) {
		t.Fatalf("reset of the persister on %s: %v, want a refusal naming %s\n%s", topics.Acks, err, topics.Messages, out)
	}
	if saved, err := e.rds.Offsets(ctx, consumers.GroupPersister, topics.Acks); err != nil || len(saved) != 0 {
		t.Fatalf("the persister's saved positions on %s after the refused reset: %v (%v), want none", topics.Acks, saved, err)
	}
}

// A broker that cannot be reached is an error, not a cluster without
// consumer groups: an operator checks the list for MEMBERS 0 before a
// reset or a rebuild.
func TestListOfGroupsFromABrokerThatIsDownFails(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var out, errOut strings.Builder
	err = run(context.Background(), []string{"consumer-groups", "list"},
		func(k string) string { return map[string]string{"CHAT_KAFKA_BROKERS": addr}[k] }, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("consumer-groups list from %s, where no broker listens: %v, want an error naming it\n%s", addr, err, out.String())
	}
}

// A command stopped by Ctrl-C says nothing of the broker: only a request
// that failed while the command ran suggests it is down.
func TestAnInterruptedCommandDoesNotBlameTheBroker(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	env := func(k string) string { return map[string]string{"CHAT_KAFKA_BROKERS": addr}[k] }
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"consumer-groups", "list"}, env, &out, &errOut); err == nil || !strings.Contains(err.Error(), "is the broker up?") {
		t.Fatalf("consumer-groups list from %s, where no broker listens: %v, want it to ask whether the broker is up", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = run(ctx, []string{"consumer-groups", "list"}, env, &out, &errOut)
	if err == nil || strings.Contains(err.Error(), "broker up") {
		t.Fatalf("consumer-groups list interrupted: %v, want an error that does not blame the broker", err)
	}
}

// A running group that is none of chatd's (an analyst's) keeps its
// position in Kafka: its refusal offered -force, and -force was refused
// with the same text offering -force again. Neither offers it.
func TestResetOfARunningGroupNotChatdsOffersNoForce(t *testing.T) {
	e := newEnv(t, 1)
	ctx := context.Background()
	e.sendMessages(schema.Message{Gid: "g1", Sender: "u1", ClientMsgID: "c1", SentAt: time.Now().UnixMilli(), Body: []byte("x")})
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.brokers, GroupID: "analytics.export", Topic: topics.Messages,
		Dialer: &kafka.Dialer{Timeout: 5 * time.Second}, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := r.ReadMessage(rctx); err != nil {
		t.Fatal(err)
	}
	for _, force := range []bool{false, true} {
		args := []string{"consumer-groups", "reset", "analytics.export", "-to", "earliest", "-topic", topics.Messages}
		if force {
			args = append(args, "-force")
		}
		_, err := e.ctl(args...)
		if !errors.Is(err, ErrGroupActive) || strings.Contains(err.Error(), "-force") && !strings.Contains(err.Error(), "-force cannot move it") {
			t.Errorf("reset (-force %v) of a running group not chatd's: %v; want a refusal offering no -force", force, err)
		}
	}
}
