package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// buildChatd compiles this command once per test binary run.
func buildChatd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chatd")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

type chatdProc struct {
	cmd  *exec.Cmd
	log  *strings.Builder
	done chan error
}

func startChatd(t *testing.T, bin string, env []string, args ...string) *chatdProc {
	t.Helper()
	p := &chatdProc{cmd: exec.Command(bin, args...), log: &strings.Builder{}, done: make(chan error, 1)}
	// The shell's CHAT_* variables (a CHAT_KAFKA_BROKERS left set) would
	// change what the test runs.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHAT_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("chatd log:\n%s", p.log.String())
		}
	})
	return p
}

func (p *chatdProc) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("chatd exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("chatd did not stop within 15 s of SIGTERM")
	}
}

func waitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within 30 s", url)
}

func kcat(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatal("kcat is not installed; install it with `make deps` (apt-get install kcat)")
	}
	out, err := exec.Command("kcat", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kcat %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// api sends an HTTP request with body and, unless empty, a bearer token,
// and returns the answer's status and body.
func api(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

func TestDevRunsSurvivesRestartAndKcatReadsIt(t *testing.T) {
	bin := buildChatd(t)
	data := t.TempDir()
	httpAddr, kafkaAddr := freeAddr(t), freeAddr(t)
	env := []string{"CHAT_HTTP_ADDR=" + httpAddr, "CHAT_KAFKA_LISTEN=" + kafkaAddr, "CHAT_DATA_DIR=" + data, "CHAT_PARTITIONS=4"}
	p := startChatd(t, bin, env, "dev")
	waitHealthy(t, "http://"+httpAddr+"/healthz")

	meta := kcat(t, "-b", kafkaAddr, "-L")
	for _, topic := range []string{topics.Messages, topics.Acks, topics.Receipts, topics.Members, topics.DeadLetter} {
		if !strings.Contains(meta, fmt.Sprintf("topic %q with 4 partitions", topic)) {
			t.Fatalf("kcat -L does not list %s with 4 partitions:\n%s", topic, meta)
		}
	}
	prod, err := producers.New(producers.Config{Brokers: []string{kafkaAddr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last int64
	for i := 0; i < 5; i++ {
		if last, err = prod.SendMessage(ctx, &schema.Message{Gid: "g1", Sender: "u1", ClientMsgID: fmt.Sprint("c", i), SentAt: time.Now().UnixMilli(), Body: []byte("hello")}); err != nil {
			t.Fatal(err)
		}
	}
	prod.Close()
	part := topics.Partition("g1", 4)
	read := func() []string {
		out := kcat(t, "-b", kafkaAddr, "-C", "-t", topics.Messages, "-p", fmt.Sprint(part), "-o", "beginning", "-e", "-q", "-f", "%k %o\n")
		return strings.Fields(strings.TrimSpace(out))
	}
	before := read()
	if len(before) != 10 || before[0] != "g1" || before[9] != fmt.Sprint(last) {
		t.Fatalf("kcat read %v, want 5 records of g1 ending at offset %d", before, last)
	}

	p.stop(t)
	p = startChatd(t, bin, env, "dev")
	waitHealthy(t, "http://"+httpAddr+"/healthz")
	if after := read(); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("after a restart kcat reads %v, want %v", after, before)
	}
	if !strings.Contains(p.log.String(), "rebuilt from the topics") {
		t.Fatalf("the log does not say the embedded Redis is rebuilt from the topics:\n%s", p.log)
	}
	p.stop(t)
}

func TestBadSettingsSayWhatToDo(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"nope"}, nil, `unknown role "nope": want one of dev, gateway, fanout, persister, projector, e.g. chatd dev`},
		{nil, nil, "no role given: run chatd ROLE, the ROLE one of dev, gateway, fanout, persister, projector"},
		{[]string{"projectors"}, nil, `unknown role "projectors" (did you mean projector?)`},
		{[]string{"-partitions", "4", "dev"}, nil, "-partitions is a flag, but the role comes first: chatd dev -partitions 4"},
		{[]string{"-partitions", "4"}, nil, "-partitions is a flag, but no role comes first: chatd ROLE -partitions 4, the ROLE one of dev, gateway"},
		{[]string{"dev", "-partitions", "0"}, nil, "partitions must be"},
		{[]string{"dev"}, map[string]string{"CHAT_LOG_LEVEL": "loud"}, "log-level"},
		{[]string{"persister"}, nil, "CHAT_KAFKA_BROKERS"},
		{[]string{"dev", "extra"}, nil, "flags go after the role"},
		{[]string{"dev"}, map[string]string{"CHAT_KAFKA_BROKERS": "kafka1:9092"}, "unset it for dev"},
		{[]string{"dev"}, map[string]string{"CHAT_MESSAGE_RETENTION": "1m"}, "is below 1h0m0s"},
		{[]string{"dev"}, map[string]string{"CHAT_SHUTDOWN_TIMEOUT": "0s"}, "shutdown could drain nothing"},
		{[]string{"dev"}, map[string]string{"CHAT_EVENT_RETENTION": "-1h"}, "event-retention -1h0m0s is negative (CHAT_EVENT_RETENTION): use a positive duration, e.g. 2160h (0 keeps them)"},
		{[]string{"dev", "-data-dir", "/proc/no-such-dir"}, nil, "set CHAT_DATA_DIR (-data-dir) to a directory chatd may write"},
		{[]string{"dev"}, map[string]string{"CHAT_ALLOWED_ORIGINS": "chat.example.com,[bad"}, `allowed-origins: "[bad" is no host pattern (CHAT_ALLOWED_ORIGINS): syntax error in pattern; use hosts such as chat.example.com`},
		// Refused by the gateway once the stores had been waited for, as
		// "gateway: node name: schema: invalid id: ...", naming no setting.
		{[]string{"dev"}, map[string]string{"CHAT_NODE_ID": "gw 1"}, `node-id "gw 1" (CHAT_NODE_ID): schema: invalid id: "gw 1" has byte ' ' at 2; use letters, digits and _.:@- (e.g. gw-1); or leave it unset for hostname-pid`},
		{[]string{"dev"}, map[string]string{"CHAT_CLICKHOUSE_CONNS": "0"}, "clickhouse-conns must be a whole number >= 1 (CHAT_CLICKHOUSE_CONNS)"},
		{[]string{"dev"}, map[string]string{"CHAT_JWT_SECRET": "short"}, "jwt-secret is 5 bytes (CHAT_JWT_SECRET): tokens signed with it can be forged; use at least 32, e.g. the output of openssl rand -hex 32"},
	} {
		// Ports and a data dir of its own: a check that regressed starts
		// chatd, which must neither take a port another run holds nor
		// write to the source tree, and stops within the context.
		env := map[string]string{"CHAT_HTTP_ADDR": freeAddr(t), "CHAT_KAFKA_LISTEN": freeAddr(t), "CHAT_DATA_DIR": t.TempDir(), "CHAT_LOG_LEVEL": "error"}
		maps.Copy(env, c.env)
		getenv := func(k string) string { return env[k] }
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := run(ctx, c.args, getenv)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("chatd %v: error %v, want one mentioning %q", c.args, err, c.want)
		}
	}
}

// A deployment often hands every role one set of variables: a short
// CHAT_JWT_SECRET is the gateway's to refuse, not the roles that never
// verify a token.
func TestAShortJWTSecretStopsOnlyTheRolesThatVerifyTokens(t *testing.T) {
	env := map[string]string{"CHAT_JWT_SECRET": "short", "CHAT_KAFKA_BROKERS": "127.0.0.1:9"}
	getenv := func(k string) string { return env[k] }
	for _, role := range []string{"fanout", "persister", "projector"} {
		if _, err := parseSettings(role, nil, getenv, io.Discard); err != nil {
			t.Errorf("chatd %s with a 5-byte CHAT_JWT_SECRET: %v; want it taken (the role verifies no token)", role, err)
		}
	}
	if _, err := parseSettings("gateway", nil, getenv, io.Discard); err == nil || !strings.Contains(err.Error(), "jwt-secret is 5 bytes") {
		t.Errorf("chatd gateway with a 5-byte CHAT_JWT_SECRET: error %v; want it refused", err)
	}
}

// chatd dev keeps the address of its embedded Redis, on another port at
// each start, in the data dir while it runs, so that chatctl is pointed at
// it with CHAT_REDIS_ADDRS=$(cat data/redis-addr) rather than from the log.
func TestDevKeepsItsRedisAddressInTheDataDir(t *testing.T) {
	data, httpAddr := t.TempDir(), freeAddr(t)
	env := map[string]string{"CHAT_HTTP_ADDR": httpAddr, "CHAT_KAFKA_LISTEN": freeAddr(t), "CHAT_DATA_DIR": data,
		"CHAT_PARTITIONS": "2", "CHAT_LOG_LEVEL": "warn"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"dev"}, func(k string) string { return env[k] }) }()
	waitHealthy(t, "http://"+httpAddr+"/healthz")
	file := filepath.Join(data, "redis-addr")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("chatd dev is up, and %v", err)
	}
	rc := redis.NewClient(&redis.Options{Addr: strings.TrimSpace(string(b))})
	defer rc.Close()
	if n, err := rc.DBSize(ctx).Result(); err != nil || n == 0 {
		t.Errorf("the Redis at %q (data/redis-addr) holds %d keys (%v), want chatd dev's projections", b, n, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chatd dev: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("chatd dev did not stop within 20 s")
	}
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("data/redis-addr is still there after chatd dev stopped (%v): it names a Redis that is gone", err)
	}
}

// An address in use is refused with another port of the same host to
// try, not the busy one again (127.0.0.1:8080 when 8080 was taken).
func TestABusyPortIsRefusedSuggestingTheNext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr)
	// The port suggested is the first free one after the busy one, which
	// another test's listener may hold: one of the next hundred.
	suggested := regexp.MustCompile(`e\.g\. 127\.0\.0\.1:(\d+)`)
	for _, c := range []struct{ env, want string }{
		{"CHAT_HTTP_ADDR", "set CHAT_HTTP_ADDR (-http-addr) to a free host:port, e.g. 127.0.0.1:"},
		{"CHAT_METRICS_ADDR", "set CHAT_METRICS_ADDR to a free host:port (e.g. 127.0.0.1:"},
	} {
		env := map[string]string{"CHAT_HTTP_ADDR": freeAddr(t), "CHAT_KAFKA_LISTEN": freeAddr(t), "CHAT_DATA_DIR": t.TempDir(),
			"CHAT_PARTITIONS": "1", "CHAT_LOG_LEVEL": "warn"}
		env[c.env] = busy.String()
		err := run(context.Background(), []string{"dev"}, func(k string) string { return env[k] })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("chatd dev with %s=%s, a port in use: %v, want %q", c.env, busy, err, c.want)
			continue
		}
		m := suggested.FindStringSubmatch(err.Error())
		if p, _ := strconv.Atoi(m[1]); p <= busy.Port || p > busy.Port+100 {
			t.Errorf("chatd dev with %s=%s, a port in use: suggested port %d, want one of the next hundred: %v", c.env, busy, p, err)
		}
	}
}
