package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

type brokerProc struct {
	cmd  *exec.Cmd
	log  *testserver.Output
	done chan struct{}
}

func startBroker(t *testing.T, bin, addr, dir string) *brokerProc {
	t.Helper()
	p := &brokerProc{cmd: exec.Command(bin, "-listen", addr, "-data-dir", dir, "-partitions", "2"), log: &testserver.Output{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.done })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if strings.Contains(p.log.String(), "serving Kafka") { // topics made
			break
		}
		select {
		case <-p.done:
			t.Fatalf("chatbroker exited at start:\n%s", p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("chatbroker does not listen on %s after 20 s:\n%s", addr, p.log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// kill9 kills the broker as a crash would: no flush, no close.
func (p *brokerProc) kill9() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// read returns every record of chat.messages partition part as
// "offset:value".
func read(t *testing.T, addr string, part int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := kafka.DialLeader(ctx, "tcp", addr, topics.Messages, part)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	last, err := conn.ReadLastOffset()
	if err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topics.Messages, Partition: part, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []string
	for int64(len(out)) < last {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("reading partition %d at %d of %d: %v", part, len(out), last, err)
		}
		out = append(out, fmt.Sprintf("%d:%x", m.Offset, m.Value))
	}
	return out
}

// A broker killed with SIGKILL while producers write comes back on the same
// address with every acknowledged record at its offset, and its topics and
// consumer group offsets.
func TestKill9KeepsEveryAcknowledgedRecord(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "chatbroker")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	data := filepath.Join(dir, "kafka")
	b := startBroker(t, bin, addr, data)

	// A committed group offset must come back too (the fan-out keeps its
	// position there).
	client := &kafka.Client{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(addr), Timeout: 10 * time.Second}
	ctx := context.Background()
	if _, err := client.OffsetCommit(ctx, &kafka.OffsetCommitRequest{GroupID: "chat.test", GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topics.Messages: {{Partition: 1, Offset: 3}}}}); err != nil {
		t.Fatal(err)
	}

	prod, err := producers.New(producers.Config{Brokers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var mu sync.Mutex
	acked := map[int64]string{} // msgid -> gid, acknowledged to the producer
	stop := testserver.Load(4, func(w, i int) {
		gid := fmt.Sprintf("g%d", w)
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		id, err := prod.SendMessage(sctx, &schema.Message{Gid: gid, Sender: "u", ClientMsgID: fmt.Sprintf("c%d-%d", w, i), SentAt: time.Now().UnixMilli(), Body: []byte("x")})
		cancel()
		if err != nil {
			return // after the kill: not acknowledged, no promise
		}
		mu.Lock()
		if prev, dup := acked[id]; dup && topics.Partition(prev, 2) == topics.Partition(gid, 2) {
			t.Errorf("msgid %d acknowledged twice in one partition", id)
		}
		acked[id] = gid
		mu.Unlock()
	})
	time.Sleep(1500 * time.Millisecond)
	b.kill9()
	stop()
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	if n < 20 {
		t.Fatalf("only %d records acknowledged before the kill; the test needs traffic to mean anything", n)
	}
	before := [2][]string{}
	b = startBroker(t, bin, addr, data)
	// kafka-go's shared transport still holds connections to the killed
	// broker; the first request on one would read EOF.
	kafka.DefaultTransport.(*kafka.Transport).CloseIdleConnections()
	for part := 0; part < 2; part++ {
		before[part] = read(t, addr, part)
	}
	// Every acknowledged msgid is there, in its group's partition.
	for id, gid := range acked {
		part := topics.Partition(gid, 2)
		if id >= int64(len(before[part])) {
			t.Fatalf("acknowledged msgid %d of %s (partition %d) lost: the partition has %d records after kill -9", id, gid, part, len(before[part]))
		}
	}
	// The topics and the group offset survived.
	if err := topics.Ensure(ctx, topics.Config{Brokers: []string{addr}, Partitions: 2}, nil); err != nil {
		t.Fatalf("topics after restart: %v", err)
	}
	// Read with franz-go's client: kafka-go's gets EOF from kfake asking
	// after a restart for a group that only ever had simple commits.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = "chat.test"
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 || resp.Topics[0].Partitions[0].Offset != 3 {
		t.Fatalf("committed offset after kill -9: %+v, %v; want 3", resp, err)
	}
	// A clean stop and start keeps the same log.
	b.cmd.Process.Signal(syscall.SIGTERM)
	<-b.done
	if !strings.Contains(b.log.String(), "stopping") {
		t.Fatalf("no orderly stop on SIGTERM:\n%s", b.log)
	}
	startBroker(t, bin, addr, data)
	for part := 0; part < 2; part++ {
		if after := read(t, addr, part); strings.Join(after, ",") != strings.Join(before[part], ",") {
			t.Fatalf("partition %d changed over a clean restart: %d records, had %d", part, len(after), len(before[part]))
		}
	}
}

// -h prints the usage and succeeds, as chatd -h and chatctl -h do.
func TestHelpIsNotAnError(t *testing.T) {
	var out strings.Builder
	if err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &out); err != nil {
		t.Fatalf("chatbroker -h: %v, want the usage and no error", err)
	}
	if !strings.Contains(out.String(), "-listen") {
		t.Fatalf("chatbroker -h printed:\n%s\nwant the flags", out.String())
	}
}

func TestSettingsSayWhatIsWrong(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-partitions", "-1"}, nil, "partitions must be"},
		{nil, map[string]string{"CHAT_PARTITIONS": "many"}, "CHAT_PARTITIONS"},
		{[]string{"extra"}, nil, "flags only"},
		{[]string{"-data-dir", ""}, nil, "data-dir is required"},
		{[]string{"-message-retention", "10m"}, nil, "below 1h"},
		{nil, map[string]string{"CHAT_MESSAGE_RETENTION": "a week"}, "CHAT_MESSAGE_RETENTION"},
	} {
		_, err := parse(c.args, func(k string) string { return c.env[k] }, os.Stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("chatbroker %v %v: %v, want an error mentioning %q", c.args, c.env, err, c.want)
		}
	}
}

// A deployment without ClickHouse keeps the history in chat.messages and
// refuses a topic that deletes messages after a time: chatbroker
// -partitions makes it keep everything when told, as chatd would.
func TestTheTopicsChatbrokerMakesKeepWhatTheyAreTold(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", addr, "-data-dir", t.TempDir(), "-partitions", "2", "-message-retention", "-1h", "-no-sync"},
			func(string) string { return "" }, io.Discard)
	}()
	defer func() { cancel(); <-done }()
	cfg := topics.Config{Brokers: []string{addr}, Partitions: 2, MessageRetention: -1, LogIsHistory: true}
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := topics.Ensure(context.Background(), cfg, nil)
		if err == nil {
			break
		}
		if errors.Is(err, topics.ErrMismatch) || time.Now().After(deadline) {
			t.Fatalf("a role without ClickHouse on the topics of chatbroker -message-retention -1h: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
