package broker_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// The test binary runs a broker of its own, to be killed, when these are set.
const (
	childDir    = "CHAT_TEST_BROKER_DIR"
	childListen = "CHAT_TEST_BROKER_LISTEN"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDir); dir != "" {
		b, err := broker.Start(broker.Config{Listen: os.Getenv(childListen), DataDir: dir, SyncWrites: true})
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(1)
		}
		fmt.Println("ADDR", b.Addr())
		select {}
	}
	os.Exit(m.Run())
}

// readTopic returns every record of partition 0 of topic.
func readTopic(t *testing.T, addr, topic string) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := kafka.DialLeader(ctx, "tcp", addr, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	first, last, err := conn.ReadOffsets()
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{addr}, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	r.SetOffset(first)
	var out []kafka.Message
	for {
		if len(out) > 0 && out[len(out)-1].Offset+1 >= last || first >= last {
			return out
		}
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
}

func startChild(t *testing.T, dir, listen string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childDir+"="+dir, childListen+"="+listen)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "ADDR "); ok {
			go func() {
				for sc.Scan() {
				}
			}()
			return cmd, a
		}
	}
	cmd.Process.Kill()
	t.Fatal("child broker did not start")
	return nil, ""
}

// Acknowledged records of the embedded broker survive a kill -9 of its
// process, and the log goes on at the same offsets. (What a kill leaves
// is the page cache's, SyncWrites or not: what SyncWrites adds, the fsync
// before the acknowledgement, only a lost machine would show.)
func TestAcknowledgedRecordsSurviveAKill(t *testing.T) {
	dir := t.TempDir()
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	child, addr := startChild(t, dir, listen)
	ctx := context.Background()
	if err := topics.Ensure(ctx, topics.Config{Brokers: []string{addr}, Partitions: 1}, nil); err != nil {
		t.Fatal(err)
	}
	p, err := producers.New(producers.Config{Brokers: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := 0; i < 20; i++ {
		id, err := p.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "u1", ClientMsgID: fmt.Sprint("c", i), Body: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := p.SendMembers(ctx, schema.Member{Gid: "g1", Uid: "u1", Op: schema.OpJoin, Pos: ids[19], By: "a"}); err != nil {
		t.Fatal(err)
	}
	child.Process.Signal(syscall.SIGKILL)
	child.Wait()

	_, addr = startChild(t, dir, listen)
	recs := readTopic(t, addr, topics.Messages)
	if len(recs) != 20 || recs[19].Offset != ids[19] {
		t.Fatalf("after kill -9 and restart chat.messages holds %d records; want the 20 acknowledged ones", len(recs))
	}
	if m := readTopic(t, addr, topics.Members); len(m) != 1 {
		t.Fatalf("after kill -9 and restart chat.members holds %d records, want 1", len(m))
	}
	// A Join (Head) right after the restart: the producer's pooled
	// connection to the killed broker must not fail it.
	if _, err := p.Join(ctx, "g1", "u2", "admin"); err != nil {
		t.Fatalf("Join right after a broker restart: %v", err)
	}
	h, err := p.Head(ctx, "g1")
	if err != nil || h != ids[19] {
		t.Fatalf("Head after restart = %d, %v; want %d", h, err, ids[19])
	}
	id, err := p.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "u1", ClientMsgID: "after", Body: []byte("x")})
	if err != nil || id != ids[19]+1 {
		t.Fatalf("send after restart: msgid %d, %v; want %d", id, err, ids[19]+1)
	}
	p.Close()
}

// A compacted topic keeps its keys' newest records however old they are:
// kfake's compaction also applies time retention, by default 7 days, which
// would delete a member's join or a cursor written a week ago.
func TestCompactedTopicsKeepOldRecords(t *testing.T) {
	b, err := broker.Start(broker.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	if err := topics.Ensure(ctx, topics.Config{Brokers: []string{b.Addr()}, Partitions: 1}, nil); err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Transport: testserver.KafkaTransport(t), Addr: kafka.TCP(b.Addr()), Topic: topics.Members, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	joined := schema.Member{Gid: "g1", Uid: "u1", Op: schema.OpJoin, Pos: -1, By: "admin", At: time.Now().Add(-8 * 24 * time.Hour).UnixMilli()}
	if err := w.WriteMessages(ctx, kafka.Message{Key: schema.MemberKey("g1", "u1"), Value: schema.AppendMember(nil, &joined),
		Time: time.UnixMilli(joined.At)}); err != nil { // a join written 8 days ago
		t.Fatal(err)
	}
	b.Cluster().Compact() // what kfake's hourly cleaner runs
	if recs := readTopic(t, b.Addr(), topics.Members); len(recs) != 1 {
		t.Fatalf("chat.members after compaction holds %d records; want the only (newest) record of g1/u1 kept", len(recs))
	}
}

// Two brokers on one data dir would hand out the same offsets and write
// the same files: the second is refused, with what to do, until the first
// has stopped.
func TestASecondBrokerOnADataDirInUseIsRefused(t *testing.T) {
	dir := t.TempDir()
	b1, err := broker.Start(broker.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if b2, err := broker.Start(broker.Config{DataDir: dir}); err == nil {
		b2.Close()
		b1.Close()
		t.Fatal("a second broker started on a data dir in use")
	} else if !strings.Contains(err.Error(), "in use by another broker") {
		t.Fatalf("the refusal: %v", err)
	}
	b1.Close()
	b3, err := broker.Start(broker.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	b3.Close()
}

// A listen address without a port (CHAT_KAFKA_LISTEN=localhost) was
// answered "missing port in address; is another broker running there?":
// the operator looked for a broker that was not there. Only an address in
// use asks that; another is told the form wanted.
func TestAListenAddressThatIsNoHostPortIsNotTakenForOneInUse(t *testing.T) {
	_, err := broker.Start(broker.Config{Listen: "localhost"})
	if err == nil || strings.Contains(err.Error(), "another broker") || !strings.Contains(err.Error(), "set CHAT_KAFKA_LISTEN to a host:port of this machine, e.g. 127.0.0.1:9092") {
		t.Errorf("listen on localhost: %v; want the host:port form asked for, and no other broker suspected", err)
	}
	b1, err := broker.Start(broker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	if b2, err := broker.Start(broker.Config{Listen: b1.Addr()}); err == nil {
		b2.Close()
		t.Fatal("a second broker listens on the first's address")
	} else if !strings.Contains(err.Error(), "is another broker running there?") {
		t.Errorf("listen on an address in use: %v; want it to ask for the other broker", err)
	}
}

// A data dir whose state files are damaged stops the broker with an error
// that names the directory and what to do, not a bare JSON parse error.
func TestADamagedDataDirIsNamedInTheError(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Start(broker.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := topics.Ensure(context.Background(), topics.Config{Brokers: []string{b.Addr()}, Partitions: 1}, nil); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := os.WriteFile(filepath.Join(dir, "topics.json"), []byte(`{"topics":[{"name":"chat.mes`), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err = broker.Start(broker.Config{DataDir: dir})
	if err == nil {
		b.Close()
		t.Fatal("the broker started on a data dir with a half-written topics.json")
	}
	if !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "topics.json") || !strings.Contains(err.Error(), "backup") {
		t.Fatalf("the error does not name the data dir, the file and what to do: %v", err)
	}
	t.Log(err)
	// The lock is released: the same dir can be tried again once repaired.
	if err := os.Remove(filepath.Join(dir, "topics.json")); err != nil {
		t.Fatal(err)
	}
	if b, err = broker.Start(broker.Config{DataDir: dir}); err != nil {
		t.Fatalf("after the damaged file was removed: %v", err)
	}
	b.Close()
}

// A segment cut short (a write torn by a crash, a damaged disk) loses the
// records in its damaged tail when the broker starts, and the next record
// takes their offsets: the broker's log must say so, naming the partition.
func TestADamagedSegmentIsLogged(t *testing.T) {
	dir := t.TempDir()
	b, err := broker.Start(broker.Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := topics.Ensure(ctx, topics.Config{Brokers: []string{b.Addr()}, Partitions: 1}, nil); err != nil {
		t.Fatal(err)
	}
	p, err := producers.New(producers.Config{Brokers: []string{b.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if _, err := p.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "u1", ClientMsgID: fmt.Sprint("c", i), Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()
	b.Close()
	seg := filepath.Join(dir, "partitions", topics.Messages+"-0", "0.dat")
	raw, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seg, raw[:len(raw)-10], 0o644); err != nil {
		t.Fatal(err)
	}
	var out testserver.LogBuffer
	b, err = broker.Start(broker.Config{DataDir: dir, Log: slog.New(slog.NewTextHandler(&out, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if recs := readTopic(t, b.Addr(), topics.Messages); len(recs) != 9 {
		t.Fatalf("%d records after the restart, want the 9 before the torn one", len(recs))
	}
	if s := out.String(); !strings.Contains(s, "level=WARN") || !strings.Contains(s, topics.Messages+"-0") || !strings.Contains(s, "corrupt") {
		t.Fatalf("the broker's log does not report the damaged segment of %s-0:\n%s", topics.Messages, s)
	}
}
