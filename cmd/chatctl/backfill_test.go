package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os/exec"
	"regexp"
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

func TestBackfillTwiceEqualsOnceAndMatchesTheLiveConsumers(t *testing.T) {
	e := newEnv(t, 4)
	live := e.withClickHouse("live")
	liveName := e.vars["CHAT_CLICKHOUSE_DATABASE"]
	ctx := context.Background()
	// The live consumers fill one database ...
	var rs []runner
	p, err := (&consumers.Persister{Redis: e.rds, ClickHouse: live}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, p)
	a, err := (&consumers.AckProjector{Redis: e.rds, ClickHouse: live}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, a)
	rc, err := (&consumers.ReceiptProjector{Redis: e.rds, ClickHouse: live}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, rc)
	m, err := (&consumers.MemberProjector{Redis: e.rds, ClickHouse: live}).Runner(e.base())
	if err != nil {
		t.Fatal(err)
	}
	rs = append(rs, m)
	for _, r := range rs {
		e.start(r)
	}
	sent := workload(t, e, 8, 8, 25)
	// ... including a resend, which the persister drops and so must the
	// backfill, and a poison record, which both skip.
	first := sent["g0"][0]
	first.SentAt += 1000
	if _, err := e.prod.SendMessage(ctx, &first); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(e.brokers...), Topic: topics.Messages, Balancer: topics.Balancer{}, RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("g0"), Value: []byte{1, 1, 0xff}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	admin := newAdmin(e.brokers, topics.Security{})
	for i, topic := range []string{topics.Messages, topics.Acks, topics.Receipts, topics.Members} {
		_, n, err := admin.spans(ctx, topic, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := rs[i]
		e.waitFor(topic+" consumed", func() bool {
			st := r.Stats()
			return r.CaughtUp() && st.Records+st.DeadLettered >= n
		})
	}
	var gids []string
	for gid := range sent {
		gids = append(gids, gid)
	}
	want := chQueries(t, live, gids)
	if got := want["g0 count"]; got != fmt.Sprint(len(sent["g0"])) {
		t.Fatalf("live: g0 has %s messages, want %d (the resend dropped)", got, len(sent["g0"]))
	}

	// ... and the backfill another, from the topics alone.
	filled := e.withClickHouse("backfill")
	out := e.mustCtl("backfill")
	if !regexp.MustCompile(`backfill messages: \d+ records of chat.messages .*: \d+ rows written, 1 duplicate sends dropped, 1 did not decode`).MatchString(out) {
		t.Fatalf("backfill output:\n%s", out)
	}
	once := chQueries(t, filled, gids)
	if d := diff(want, once); len(d) > 0 {
		t.Fatalf("the backfill differs from what the live consumers wrote:\n%s", strings.Join(d, "\n"))
	}
	e.mustCtl("backfill")
	if d := diff(once, chQueries(t, filled, gids)); len(d) > 0 {
		t.Fatalf("a second backfill changed query results:\n%s", strings.Join(d, "\n"))
	}
	// Over the live database too: nothing changes.
	e.vars["CHAT_CLICKHOUSE_DATABASE"] = liveName
	e.mustCtl("backfill", "-tables", "messages,acks")
	if d := diff(want, chQueries(t, live, gids)); len(d) > 0 {
		t.Fatalf("a backfill over the live consumers' rows changed query results:\n%s", strings.Join(d, "\n"))
	}
	if _, err := e.ctl("backfill", "-tables", "window"); err == nil || !strings.Contains(err.Error(), "want some of messages") {
		t.Fatalf("backfill -tables window: %v", err)
	}
}

// A resend whose first send retention has removed from the topic, though
// ClickHouse holds it: a second backfill must drop the resend, as the
// first did and as the persister does, not store the send twice.
func TestBackfillDropsAResendWhoseFirstSendRetentionRemoved(t *testing.T) {
	e := newEnv(t, 1)
	ch := e.withClickHouse("resend")
	ctx := context.Background()
	now := time.Now().UnixMilli()
	orig := schema.Message{Gid: "g", Sender: "alice", ClientMsgID: "c1", SentAt: now, Body: []byte("hello")}
	resend := orig
	resend.SentAt = now + 2000
	other := schema.Message{Gid: "g", Sender: "bob", ClientMsgID: "c2", SentAt: now + 3000, Body: []byte("hi")}
	ids := e.sendMessages(orig, resend, other)
	e.mustCtl("backfill", "-tables", "messages")
	if n, err := ch.CountMessages(ctx, "g"); err != nil || n != 2 {
		t.Fatalf("first backfill: %d messages (%v), want 2 (the resend dropped)", n, err)
	}
	testserver.DeleteRecordsBefore(t, e.brokers, topics.Messages, 0, ids[1]) // retention removes the first send
	out := e.mustCtl("backfill", "-tables", "messages")
	if n, err := ch.CountMessages(ctx, "g"); err != nil || n != 2 || !strings.Contains(out, "1 duplicate sends dropped") {
		ms, _ := ch.Messages(ctx, "g", -1, math.MaxInt64, 10)
		t.Fatalf("second backfill after retention removed the first send: %d messages (%v), want 2:\n%+v\n%s", n, err, ms, out)
	}
}

// A resend of a first send that only ClickHouse still holds is a
// duplicate, but it does not claim the key: the first send stays the
// claim, as in the persister. So a later send with the same
// client_msg_id, farther than the window from the first send though
// within it of the resend, is a new message, and the backfill must store
// it. Before, the dropped resend stayed the claim and the later send was
// dropped too: a message the persister keeps was missing from ClickHouse.
func TestBackfillKeepsTheFirstSendAsTheClaimOfAResendItDrops(t *testing.T) {
	e := newEnv(t, 1)
	ch := e.withClickHouse("reclaim")
	ctx := context.Background()
	now := time.Now().UnixMilli()
	orig := schema.Message{Gid: "g", Sender: "alice", ClientMsgID: "c1", SentAt: now, Body: []byte("hello")}
	if _, err := e.prod.SendMessage(ctx, &orig); err != nil {
		t.Fatal(err)
	}
	e.mustCtl("backfill", "-tables", "messages", "-dedup-window", "10s")
	resend, later := orig, orig
	resend.SentAt = now + 2000 // within the window of orig: a duplicate
	later.SentAt = now + 11000 // 11s after orig, 9s after the resend: a new message
	later.Body = []byte("hello again")
	ids := e.sendMessages(resend, later)
	testserver.DeleteRecordsBefore(t, e.brokers, topics.Messages, 0, ids[0]) // retention removes the first send
	out := e.mustCtl("backfill", "-tables", "messages", "-dedup-window", "10s")
	ms, err := ch.Messages(ctx, "g", -1, math.MaxInt64, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, fmt.Sprintf("%d:%s", m.MsgID, m.Body))
	}
	if want := []string{"0:hello", fmt.Sprintf("%d:hello again", ids[1])}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ClickHouse holds %v, want %v (the resend dropped, the later send kept)\n%s", got, want, out)
	}
}

// One failed ClickHouse call (a dropped connection) does not end a
// backfill: the batch's work is tried again, with a notice, up to a limit,
// and a cancelled backfill stops waiting at once.
func TestBackfillTriesABatchAgainAfterAFailure(t *testing.T) {
	ctx := context.Background()
	calls, notices := 0, 0
	flaky := func() error {
		if calls++; calls < 3 {
			return errors.New("write: use of closed network connection")
		}
		return nil
	}
	if err := retrying(ctx, 5, time.Millisecond, flaky, func(int, time.Duration, error) { notices++ }); err != nil || calls != 3 || notices != 2 {
		t.Fatalf("two failures then success: err %v after %d calls and %d notices, want nil after 3 and 2", err, calls, notices)
	}
	calls = 0
	down := errors.New("connection refused")
	if err := retrying(ctx, 4, time.Millisecond, func() error { calls++; return down }, func(int, time.Duration, error) {}); !errors.Is(err, down) || calls != 4 {
		t.Fatalf("always failing: err %v after %d calls, want %v after 4", err, calls, down)
	}
	cctx, cancel := context.WithCancel(ctx)
	calls = 0
	start := time.Now()
	err := retrying(cctx, 5, time.Hour, func() error { calls++; return down }, func(int, time.Duration, error) { cancel() })
	if !errors.Is(err, down) || calls != 1 || time.Since(start) > time.Minute {
		t.Fatalf("cancelled while waiting: err %v after %d calls in %v, want %v after 1 at once", err, calls, time.Since(start), down)
	}
}

// A dedup window below a millisecond decides no resend a duplicate (the
// persister refuses one): the backfill would write every resend as a
// message of its own. It is refused before anything is read or written.
func TestBackfillRefusesADedupWindowThatKeepsEveryResend(t *testing.T) {
	for _, win := range []string{"-24h", "0s", "500us"} {
		err := run(context.Background(), []string{"backfill", "-dedup-window", win},
			func(k string) string {
				return map[string]string{"CHAT_KAFKA_BROKERS": "127.0.0.1:1", "CHAT_CLICKHOUSE_ADDRS": "127.0.0.1:1"}[k]
			},
			&strings.Builder{}, &strings.Builder{})
		if err == nil || !strings.HasPrefix(err.Error(), "-dedup-window ") || !strings.Contains(err.Error(), "persister") {
			t.Errorf("backfill -dedup-window %s: %v; want a refusal naming the window and the persister's", win, err)
		}
	}
}

// A backfill of no table is a mistake (an unset variable in a script):
// it is refused, naming the tables, rather than doing nothing and
// exiting 0 as though the tables were filled.
func TestBackfillRefusesNoTables(t *testing.T) {
	for _, tables := range []string{"", " , "} {
		err := run(context.Background(), []string{"backfill", "-tables", tables},
			func(k string) string {
				return map[string]string{"CHAT_KAFKA_BROKERS": "127.0.0.1:1", "CHAT_CLICKHOUSE_ADDRS": "127.0.0.1:1"}[k]
			},
			&strings.Builder{}, &strings.Builder{})
		if err == nil || !strings.HasPrefix(err.Error(), "-tables ") || !strings.Contains(err.Error(), "messages, acks, receipts, members") {
			t.Errorf("backfill -tables %q: %v; want a refusal naming the tables", tables, err)
		}
	}
}

// A backfill cut short (Ctrl-C) after some tables were filled says how to
// go on with the rest, so that hours of history are not read again.
func TestABackfillCutShortSaysHowToGoOn(t *testing.T) {
	e := newEnv(t, 1)
	ch := e.withClickHouse("cut")
	e.mustCtl("groups", "create", "g", "alice", "bob")
	e.sendMessages(schema.Message{Gid: "g", Sender: "alice", ClientMsgID: "c1", SentAt: time.Now().UnixMilli(), Body: []byte("hi")})
	if err := e.prod.SendAcks(context.Background(), schema.Ack{Gid: "g", Uid: "bob", Upto: 0, At: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelOn{word: "backfill messages:", cancel: cancel}
	err := run(ctx, []string{"backfill", "-dedup-window", "48h", "-batch", "500"}, func(k string) string { return e.vars[k] }, out, &strings.Builder{})
	// The flags set go on too: a backfill of messages with another
	// dedup window than the first run's would write resends as messages.
	const want = "chatctl backfill -tables acks,receipts,members -batch=500 -dedup-window=48h0m0s`"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("backfill cut short after messages: %v\n%s; want an error saying to go on with %s", err, out.String(), want)
	}
	if n, err := ch.CountMessages(context.Background(), "g"); err != nil || n != 1 {
		t.Fatalf("messages of g after the backfill cut short: %d (%v), want 1", n, err)
	}
}

// The command a backfill cut short prints goes to logs and is pasted into
// a shell: it leaves the passwords out, saying to give them again, and
// quotes each value so that the shell reads back what the run was given.
// Before, it repeated the passwords and broke on an empty value or one
// with spaces.
func TestABackfillsGoOnCommandKeepsSecretsOutAndQuotesValues(t *testing.T) {
	c := newCommand("backfill", func(string) string { return "" }, io.Discard, io.Discard)
	backfillFlags(c)
	given := []string{"-clickhouse-password", "s3cret pass", "-redis-password", "r3dis",
		"-clickhouse-database", "", "-clickhouse-user", "ops team", "-kafka-brokers", "k1:9092,k2:9092", "-dedup-window", "48h",
		"-kafka-tls", "-kafka-sasl", "scram-sha-256", "-kafka-sasl-user", "ops", "-kafka-sasl-password", "k4fka"}
	if _, err := c.parse(given); err != nil {
		t.Fatal(err)
	}
	msg := goOn(c, []string{"messages"}, []string{"acks", "receipts"})
	for _, s := range []string{"s3cret", "r3dis", "k4fka"} {
		if strings.Contains(msg, s) {
			t.Errorf("the go-on line shows the password %q: %s", s, msg)
		}
	}
	for _, s := range []string{"-clickhouse-password", "CHAT_CLICKHOUSE_PASSWORD", "-redis-password", "CHAT_REDIS_PASSWORD", "-kafka-sasl-password", "CHAT_KAFKA_SASL_PASSWORD"} {
		if !strings.Contains(msg, s) {
			t.Errorf("the go-on line does not say to give %s again: %s", s, msg)
		}
	}
	_, line, ok := strings.Cut(msg, "`chatctl backfill ")
	if !ok {
		t.Fatalf("no command in %q", msg)
	}
	line, _, _ = strings.Cut(line, "`")
	// The shell reads the line back into the flags the run was given.
	out, err := exec.Command("sh", "-c", "eval \"set -- $1\"; for w in \"$@\"; do printf '%s\\0' \"$w\"; done", "sh", line).Output()
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	again := newCommand("backfill", func(string) string { return "" }, io.Discard, io.Discard)
	o := backfillFlags(again).(*backfillOpts)
	if rest, err := again.parse(append(args, "-kafka-sasl-password", "k4fka")); err != nil || len(rest) > 0 { // given again, as the line says
		t.Fatalf("the go-on command %q does not parse back: %v, arguments %q", line, err, rest)
	}
	got := fmt.Sprintf("%q %q %q %q %v %v", o.tables, again.s.ClickHouseDB, again.s.ClickHouseUser, again.s.KafkaBrokers, o.dedup, again.s.KafkaTLS)
	if want := `"acks,receipts" "" "ops team" "k1:9092,k2:9092" 48h0m0s true`; got != want {
		t.Errorf("the shell reads the go-on command %q as %s, want %s", line, got, want)
	}
}

// The backfill drops a resend as the persister does (store.SameSend): a
// sent_at so far off that the difference of two overflows an int64 (a
// broken clock, a poison record) must not make two sends one, or the
// backfill leaves out a message the persister stored.
func TestBackfillDecidesDuplicatesAsThePersisterDoes(t *testing.T) {
	win := (24 * time.Hour).Milliseconds()
	for _, c := range []struct{ first, resend int64 }{
		{0, math.MinInt64}, {math.MaxInt64, math.MinInt64}, {math.MinInt64, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64 - 1}, {1700000000000, 1700000001000}, {1700000000000, 1700000000000 + win + 1},
	} {
		pc := newClaims(24 * time.Hour).part(0)
		a := schema.Message{Gid: "g", Sender: "u", ClientMsgID: "c", MsgID: 1, SentAt: c.first}
		b := a
		b.MsgID, b.SentAt = 2, c.resend
		if pc.dup(&a, win) {
			t.Fatalf("the first send (sent_at %d) taken for a duplicate", c.first)
		}
		if got, want := pc.dup(&b, win), store.SameSend(c.resend, c.first, win); got != want {
			t.Errorf("sent_at %d, then %d: the backfill says duplicate %v, the persister %v", c.first, c.resend, got, want)
		}
	}
}
