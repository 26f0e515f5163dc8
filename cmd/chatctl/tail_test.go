package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

func TestTopicsCreateDescribeVerify(t *testing.T) {
	e := newEnv(t, 3)
	out := e.mustCtl("topics", "verify")
	if !strings.Contains(out, "ok: 5 topics match the spec (3 partitions each)") {
		t.Fatalf("verify:\n%s", out)
	}
	desc := strings.Join(strings.Fields(e.mustCtl("topics", "describe")), " ")
	for _, want := range []string{"chat.messages true 3", "cleanup.policy=compact", "retention.ms=604800000"} {
		if !strings.Contains(desc, want) {
			t.Fatalf("describe lacks %q:\n%s", want, desc)
		}
	}
	out, err := e.ctl("topics", "verify", "-partitions", "6")
	if err == nil || !strings.Contains(out, "has 3 partitions, the configuration says 6") {
		t.Fatalf("verify with another partition count: %v\n%s", err, out)
	}
	if _, err := e.ctl("topics", "create", "-partitions", "6"); err == nil || !strings.Contains(err.Error(), "set CHAT_PARTITIONS=3") {
		t.Fatalf("create with another partition count: %v, want a refusal saying what to set", err)
	}
}

// Topics kept forever (chatd without ClickHouse, chatd dev) differ from
// the default retention of the spec: verify says which setting makes the
// spec, not only how to change the topic.
func TestTopicsVerifyNamesTheRetentionSetting(t *testing.T) {
	e := newEnv(t, 2)
	out, err := e.ctl("topics", "verify", "-message-retention", "-1h")
	if err == nil {
		t.Fatalf("verify with another retention passed:\n%s", out)
	}
	if !strings.Contains(out, `chat.messages: retention.ms is "604800000", the spec says "-1"`) ||
		!strings.Contains(out, "CHAT_MESSAGE_RETENTION (-message-retention)") {
		t.Fatalf("verify with another retention: want the difference and the setting behind the spec:\n%s", out)
	}
	if !strings.Contains(err.Error(), "or the settings the warnings name") {
		t.Fatalf("verify's error: %v, want it to offer changing the settings too", err)
	}
}

func TestGroupAdministrationWritesMemberEvents(t *testing.T) {
	e := newEnv(t, 2)
	e.mustCtl("groups", "create", "team", "alice", "bob")
	if out := e.mustCtl("members", "add", "team", "bob", "carol"); !strings.Contains(out, "bob: already a member of team") {
		t.Fatalf("adding a member twice:\n%s", out)
	}
	// A uid named twice joins once: a second join would move its start.
	if out := e.mustCtl("members", "add", "team", "dave", "dave"); strings.Count(out, "dave: joined") != 1 ||
		!strings.Contains(out, "dave: already a member of team") {
		t.Fatalf("adding dave twice in one command:\n%s", out)
	}
	e.mustCtl("members", "remove", "team", "alice")
	if out, err := e.ctl("members", "remove", "team", "alice"); err == nil || err.Error() != "alice: not a member of team" {
		t.Fatalf("removing a non-member: %v, want the error \"alice: not a member of team\"\n%s", err, out)
	}
	// The leave, and the leaving before it, name the join it ends; the
	// joins name none.
	tail := e.mustCtl("tail", topics.Members)
	if !strings.Contains(tail, `"uid":"alice","op":"leaving","pos":-1,`) || !strings.Contains(tail, `"uid":"alice","op":"leave","pos":-1,`) ||
		strings.Count(tail, `"by":"chatctl","joined":-1}`) != 2 || strings.Count(tail, `"joined"`) != 2 {
		t.Fatalf("tail of %s: want alice's leaving and leave, naming her join at -1, and nothing else naming one:\n%s", topics.Members, tail)
	}
	show := strings.Join(strings.Fields(e.mustCtl("groups", "show", "team")), " ")
	for _, want := range []string{"alice left -1 -1", "bob joined -1 -", "carol joined -1 -", "dave joined -1 -"} {
		if !strings.Contains(show, want) {
			t.Fatalf("groups show lacks %q: %s", want, show)
		}
	}
	if _, err := e.ctl("groups", "create", "bad/gid", "x"); err == nil || !strings.Contains(err.Error(), "letters, digits") {
		t.Fatalf("a bad gid: %v", err)
	}
	if _, err := e.ctl("groups", "show", "nobody"); err == nil {
		t.Fatal("groups show of an unknown group succeeded")
	}
}

func TestTailPrintsDecodedJSONLines(t *testing.T) {
	e := newEnv(t, 2)
	ctx := context.Background()
	msg := schema.Message{Gid: "g", Sender: "alice", ClientMsgID: "c1", SentAt: 1700000000000, Body: []byte("héllo")}
	id, err := e.prod.SendMessage(ctx, &msg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.prod.SendAcks(ctx, schema.Ack{Gid: "g", Uid: "bob", Upto: id, At: 1700000000001}); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(e.brokers...), Topic: topics.Messages, Balancer: topics.Balancer{}, RequiredAcks: kafka.RequireAll}
	if err := w.WriteMessages(ctx, kafka.Message{Key: []byte("g"), Value: []byte("junk")}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	out := e.mustCtl("tail", topics.Messages)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("tail printed %d lines, want 2:\n%s", len(lines), out)
	}
	var rec struct {
		Topic     string
		Partition int
		Offset    int64
		Key       string
		Kind      string
		Event     messageJSON
	}
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Kind != "message" || rec.Key != "g" || rec.Offset != id || rec.Event.MsgID != id || rec.Event.Body != "héllo" ||
		rec.Event.Sender != "alice" || rec.Partition != topics.Partition("g", 2) || rec.Event.SentAt != msg.SentAt {
		t.Fatalf("first line %s decodes to %+v", lines[0], rec)
	}
	if !strings.Contains(lines[1], `"error":"schema: `) || !strings.Contains(lines[1], `"value":"anVuaw=="`) {
		t.Fatalf("a record that does not decode: %s", lines[1])
	}
	acks := e.mustCtl("tail", topics.Acks, "-n", "1")
	if !strings.Contains(acks, `"kind":"ack","event":{"gid":"g","uid":"bob","upto":`) {
		t.Fatalf("tail chat.acks: %s", acks)
	}

	// -follow prints records as they come until the count is reached.
	// When tail has read the ends is not seen from here: a new record is
	// sent every half second until it prints one.
	done := make(chan string, 1)
	go func() { done <- e.mustCtl("tail", topics.Acks, "-from", "end", "-n", "1") }()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for printed := false; !printed; {
		select {
		case <-tick.C:
			if err := e.prod.SendAcks(ctx, schema.Ack{Gid: "g", Uid: "carol", Upto: id, At: 1}); err != nil {
				t.Fatal(err)
			}
		case got := <-done:
			if !strings.Contains(got, `"uid":"carol"`) || strings.Contains(got, `"uid":"bob"`) {
				t.Fatalf("tail -from end printed %s", got)
			}
			printed = true
		case <-deadline:
			t.Fatal("tail -from end -n 1 did not print a record sent after it started")
		}
	}

	// kcat reads the same records, with the format docs/operations.md gives.
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatal("kcat is not installed; install it with `make deps` (apt-get install kcat)")
	}
	kc, err := exec.Command("kcat", "-b", e.brokers[0], "-C", "-t", topics.Acks, "-o", "beginning", "-e", "-q", "-f", "%k %p %o %T\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat: %v\n%s", err, kc)
	}
	if !strings.HasPrefix(string(kc), "g/bob ") {
		t.Fatalf("kcat printed %q", kc)
	}
}

// A topic the broker does not have: a typo is told apart from a chat.*
// topic not created yet.
func TestTailOfAMissingTopicSaysWhatToDo(t *testing.T) {
	e := newEnv(t, 2)
	if _, err := e.ctl("tail", "chat.mesages", "-n", "1"); err == nil || !strings.Contains(err.Error(), "is none of chatd's") || !strings.Contains(err.Error(), "chat.messages") {
		t.Errorf("tail of a misspelled topic: %v; want it called no topic of chatd's, with their names", err)
	}
}

// A negative -n or a -partition below -1 (all) is a mistake, not a wish
// for everything: it is refused before anything is read. Before, tail
// printed every record of every partition.
func TestTailRefusesANegativeCountOrPartition(t *testing.T) {
	e := newEnv(t, 2)
	e.sendMessages(schema.Message{Gid: "g", Sender: "u", SentAt: 1, Body: []byte("b")})
	for _, c := range []struct{ flag, value string }{{"-n", "-1"}, {"-partition", "-3"}} {
		out, err := e.ctl("tail", "chat.messages", c.flag, c.value)
		if err == nil || !strings.HasPrefix(err.Error(), c.flag+" "+c.value+":") || out != "" {
			t.Errorf("tail %s %s: %v, printed %q; want a refusal naming the flag and nothing printed", c.flag, c.value, err, out)
		}
	}
}

// A -partition past the topic's said "chat.acks has no partition 99",
// leaving the operator to find out which it has. It names them, as
// consumer-groups reset does.
func TestTailOfAPartitionTheTopicLacksNamesThoseItHas(t *testing.T) {
	e := newEnv(t, 2)
	_, err := e.ctl("tail", "chat.acks", "-partition", "99")
	if want := "-partition 99: chat.acks has partitions 0 to 1; pick one of them, or leave -partition out for all"; err == nil || err.Error() != want {
		t.Errorf("tail chat.acks -partition 99: %v; want %q", err, want)
	}
}
