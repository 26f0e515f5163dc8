package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// env is an embedded broker, a real redis-server, optionally the shared
// clickhouse-server with a database of the test's own, and the CHAT_*
// variables that point chatctl at them.
type env struct {
	t       testing.TB
	broker  *broker.Broker
	brokers []string
	prod    *producers.Producer
	rc      redis.UniversalClient
	rds     *store.Redis
	vars    map[string]string
}

var dbSeq atomic.Int64

func newEnv(t *testing.T, partitions int) *env { return newEnvTB(t, partitions) }

func newEnvTB(t testing.TB, partitions int) *env {
	t.Helper()
	b := testserver.NewBroker(t)
	var err error
	srv := testserver.NewRedis(t)
	e := &env{t: t, broker: b, brokers: []string{b.Addr()}, vars: map[string]string{
		"CHAT_KAFKA_BROKERS": b.Addr(),
		"CHAT_PARTITIONS":    fmt.Sprint(partitions),
		"CHAT_REDIS_ADDRS":   srv.Addr,
	}}
	e.rc = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { e.rc.Close() })
	if e.rds, err = store.NewRedis(e.rc, store.RedisConfig{}); err != nil {
		t.Fatal(err)
	}
	e.mustCtl("topics", "create")
	if e.prod, err = producers.New(producers.Config{Brokers: e.brokers}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.prod.Close() })
	return e
}

// withClickHouse points the env at a fresh database of the shared server
// and returns a store on it.
func (e *env) withClickHouse(name string) *store.ClickHouse {
	e.t.Helper()
	srv := testserver.SharedClickHouse(e.t)
	db := fmt.Sprintf("ctl_%s_%d_%d", name, time.Now().UnixNano()%1e6, dbSeq.Add(1))
	e.vars["CHAT_CLICKHOUSE_ADDRS"] = srv.Addr
	e.vars["CHAT_CLICKHOUSE_DATABASE"] = db
	ch, err := store.OpenClickHouse(context.Background(), store.ClickHouseConfig{Addrs: []string{srv.Addr}, Database: db})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { ch.Close() })
	return ch
}

// ctl runs chatctl in process with the env's variables.
// sendMessages sends msgs to chat.messages in turn and returns their msgids.
func (e *env) sendMessages(msgs ...schema.Message) []int64 {
	e.t.Helper()
	ids := make([]int64, len(msgs))
	for i := range msgs {
		id, err := e.prod.SendMessage(context.Background(), &msgs[i])
		if err != nil {
			e.t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

func (e *env) ctl(args ...string) (string, error) {
	out, _, err := e.ctlBoth(args...)
	return out, err
}

// ctlBoth runs chatctl with args and returns what it wrote to stdout and
// to stderr.
func (e *env) ctlBoth(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = run(ctx, args, func(k string) string { return e.vars[k] }, &out, &errOut)
	if testing.Verbose() {
		e.t.Logf("chatctl %s\n%s%s", strings.Join(args, " "), out.String(), errOut.String())
	}
	return out.String(), errOut.String(), err
}

func (e *env) mustCtl(args ...string) string {
	e.t.Helper()
	out, err := e.ctl(args...)
	if err != nil {
		e.t.Fatalf("chatctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (e *env) base() consumers.Base {
	return consumers.Base{Brokers: e.brokers, DeadLetter: e.prod, Tune: func(t *consumers.RunnerTuning) {
		t.SessionTimeout, t.RebalanceTimeout, t.MaxWait = 6*time.Second, 2*time.Second, 100*time.Millisecond
	}}
}

// runner is what the tests start: a consumer's Runner.
type runner interface {
	Run(ctx context.Context) error
	CaughtUp() bool
	Stats() consumers.Stats
}

// start runs r until the returned stop is called (or the test ends).
func (e *env) start(r runner) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("runner: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// waitFor polls cond for up to 60 s.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitGroupEmpty waits until the broker reports no member in group (a
// stopped runner leaves its group).
func (e *env) waitGroupEmpty(group string) {
	e.t.Helper()
	a := newAdmin(e.brokers, topics.Security{})
	e.waitFor(group+" to have no members", func() bool {
		info, err := a.describeGroup(context.Background(), group)
		return err == nil && len(info.Members) == 0
	})
}

func redisZ(score float64, member string) redis.Z { return redis.Z{Score: score, Member: member} }

// newOf returns a pointer to a new value of type t, for scanning.
func newOf(t reflect.Type) any { return reflect.New(t).Interface() }

// deref turns scanned pointers back into values.
func deref(ptrs []any) []any {
	out := make([]any, len(ptrs))
	for i, p := range ptrs {
		out[i] = reflect.ValueOf(p).Elem().Interface()
	}
	return out
}

// A command group named without its command, or with one it has not, is
// answered with the commands it has, not as an unknown command.
func TestACommandGroupWithoutItsCommandSaysWhichItHas(t *testing.T) {
	for args, want := range map[string]string{
		"topics":          `topics needs one of: create, describe, verify (e.g. chatctl topics create)`,
		"topics nope":     `topics has no "nope"; it needs one of: create, describe, verify`,
		"consumer-groups": `consumer-groups needs one of: list, reset`,
		"nonsense":        `unknown command "nonsense"; see chatctl help`,
	} {
		var out strings.Builder
		err := run(context.Background(), strings.Fields(args), func(string) string { return "" }, &out, &out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("chatctl %s: %v; want %q", args, err, want)
		}
	}
	// A command's -h prints its flags and is no failure (exit status 1,
	// "flag: help requested"); chatctl help names the token's settings too.
	for _, args := range []string{"token -h", "groups create -h", "tail --help"} {
		var out strings.Builder
		if err := run(context.Background(), strings.Fields(args), func(string) string { return "" }, &out, &out); err != nil || !strings.Contains(out.String(), "-kafka-brokers") {
			t.Errorf("chatctl %s: %v, %q; want its flags, and no error", args, err, out.String())
		}
	}
	var help strings.Builder
	if err := run(context.Background(), []string{"help"}, func(string) string { return "" }, &help, &help); err != nil ||
		!strings.Contains(help.String(), "CHAT_JWT_SECRET") || !strings.Contains(help.String(), "CHAT_MAX_TOKEN_TTL") {
		t.Errorf("chatctl help: %v; want CHAT_JWT_SECRET and CHAT_MAX_TOKEN_TTL among the settings:\n%s", err, help.String())
	}
	// Asked for help, a group lists its commands: it answered that it had
	// no "-h".
	for _, args := range []string{"consumer-groups -h", "topics --help", "members help"} {
		var out strings.Builder
		err := run(context.Background(), strings.Fields(args), func(string) string { return "" }, &out, &out)
		group, _, _ := strings.Cut(args, " ")
		if err != nil || !strings.Contains(out.String(), "chatctl "+group+" ") {
			t.Errorf("chatctl %s: %v, %q; want the lines of chatctl help for %s", args, err, out.String(), group)
		}
	}
}

// Flags given before the command (as many tools take them) were taken for
// its name: unknown command "-kafka-brokers 127.0.0.1:9092", under the
// whole usage. The answer is the command line with the command first.
func TestFlagsBeforeTheCommandAreAnsweredWithTheCommandFirst(t *testing.T) {
	for args, want := range map[string]string{
		"-kafka-brokers k:9092 topics verify":    "-kafka-brokers is a flag, but the command comes first: chatctl topics verify -kafka-brokers k:9092",
		"-redis-tls rebuild acks -force":         "-redis-tls is a flag, but the command comes first: chatctl rebuild -redis-tls acks -force",
		"-kafka-brokers=k:9092 groups show team": "chatctl groups show -kafka-brokers=k:9092 team",
		"-kafka-brokers k:9092":                  "-kafka-brokers is a flag, but no command comes first: chatctl COMMAND [ARGS] -kafka-brokers k:9092; chatctl help lists the commands",
	} {
		var out strings.Builder
		err := run(context.Background(), strings.Fields(args), func(string) string { return "" }, &out, &out)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("chatctl %s: %v; want %q", args, err, want)
		}
	}
}

// A -to that names no position is refused before Kafka is asked, so an
// operator whose broker is down still learns of it; a server that cannot
// be reached is named, with the settings that say where it is.
func TestMistakesAreToldBeforeAndAroundTheServers(t *testing.T) {
	env := map[string]string{"CHAT_KAFKA_BROKERS": "127.0.0.1:1"}
	var out strings.Builder
	err := run(context.Background(), []string{"consumer-groups", "reset", "chat.persister", "-to", "yesterday"}, func(k string) string { return env[k] }, &out, &out)
	if want := `-to "yesterday": want earliest, latest, a time such as 2024-05-01T12:00:00Z, or an offset >= 0`; err == nil || err.Error() != want {
		t.Errorf("reset -to yesterday with no broker: %v; want %q", err, want)
	}
	// Without -to, the usage alone did not say what was missing.
	err = run(context.Background(), []string{"consumer-groups", "reset", "chat.persister"}, func(k string) string { return env[k] }, &out, &out)
	if want := "consumer-groups reset chat.persister needs -to, where to move it: earliest, latest, a time such as 2024-05-01T12:00:00Z, or an offset"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("reset without -to: %v; want %q", err, want)
	}
	dial := fmt.Errorf("describe consumer group g: %w", &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, Err: syscall.ECONNREFUSED})
	if got, want := withDialHint(dial).Error(), "is the server at 127.0.0.1:1 up, and is it the one meant? (CHAT_KAFKA_BROKERS"; !strings.Contains(got, want) {
		t.Errorf("withDialHint = %q; want it to say %q", got, want)
	}
	// A broker not reached was asked after ("is the broker up?") without
	// a word of where its address came from: chatctl run without
	// CHAT_KAFKA_BROKERS exported asks 127.0.0.1:9092.
	err = run(context.Background(), []string{"topics", "verify"}, func(k string) string { return env[k] }, &out, &out)
	if got, want := withDialHint(err).Error(), "is the broker up? (CHAT_KAFKA_BROKERS or -kafka-brokers says where the brokers are; 127.0.0.1:9092 unless set)"; !strings.Contains(got, want) {
		t.Errorf("topics verify with no broker: %q; want it to say %q", got, want)
	}
}

// A flag wins over its variable wherever it stands, after an argument too.
func TestAFlagAfterAnArgumentWinsOverABadVariable(t *testing.T) {
	env := map[string]string{"CHAT_MESSAGE_RETENTION": "7d", "CHAT_KAFKA_BROKERS": "127.0.0.1:1"}
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"tail", "chat.messages", "-message-retention", "168h", "-n", "1"}, func(k string) string { return env[k] }, &out, &out)
	if err == nil || strings.Contains(err.Error(), "CHAT_MESSAGE_RETENTION") {
		t.Errorf("tail with -message-retention after its argument: %v; want no word of the variable the flag overrides (the broker is down)", err)
	}
}
