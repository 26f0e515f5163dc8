package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/gateway"
	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/internal/tlsclient"
)

// storesOverTLS is a broker that speaks TLS only and takes SCRAM logins,
// and a Redis whose TLS port takes an ACL user's password, both signed by
// a CA of the test's: a managed Kafka's SASL_SSL and a managed Redis.
type storesOverTLS struct {
	t      *testing.T
	files  *testserver.TLSFiles
	broker *broker.Broker
	redis  *testserver.Redis
}

func newStoresOverTLS(t *testing.T) *storesOverTLS {
	t.Helper()
	f := testserver.NewTLS(t)
	b := testserver.NewBrokerTLS(t, f, broker.User{Mechanism: "SCRAM-SHA-512", Name: "chatd", Password: "kafka-secret"})
	r := testserver.NewRedisTLS(t, f)
	r.AddUser(t, "chat", "redis-secret")
	return &storesOverTLS{t: t, files: f, broker: b, redis: r}
}

// clickhouse starts a ClickHouse whose secure native port serves the
// stores' certificate.
func (s *storesOverTLS) clickhouse() *testserver.ClickHouse {
	return testserver.NewClickHouse(s.t, testserver.SecurePort(s.files))
}

// env is the settings of a role that reaches both over TLS.
func (s *storesOverTLS) env(httpAddr string) map[string]string {
	return map[string]string{
		"CHAT_HTTP_ADDR": httpAddr, "CHAT_PARTITIONS": "2", "CHAT_JWT_SECRET": testSecret, "CHAT_ADMIN_TOKEN": "admin-token-0123456789",
		"CHAT_LOG_LEVEL":     "warn",
		"CHAT_KAFKA_BROKERS": s.broker.Addr(), "CHAT_KAFKA_CA_FILE": s.files.CAFile,
		"CHAT_KAFKA_SASL": "scram-sha-512", "CHAT_KAFKA_SASL_USER": "chatd", "CHAT_KAFKA_SASL_PASSWORD": "kafka-secret",
		"CHAT_REDIS_ADDRS": s.redis.TLSAddr, "CHAT_REDIS_CA_FILE": s.files.CAFile,
		"CHAT_REDIS_USER": "chat", "CHAT_REDIS_PASSWORD": "redis-secret",
	}
}

// Every role reaches a Kafka that takes TLS and SASL only (SASL_SSL) and a
// Redis that takes TLS and an ACL user only: a group is made, a message
// sent is pushed to a member online and pulled from the window, so the
// producer, the consumer groups, the fan-out's readers, the projectors
// and Redis's pub/sub all went over them.
func TestTheRolesReachKafkaAndRedisOverTLSWithALogin(t *testing.T) {
	s := newStoresOverTLS(t)
	gw := freeAddr(t)
	for _, role := range []string{"projector", "persister", "fanout", "gateway"} {
		addr := gw
		if role != "gateway" {
			addr = freeAddr(t)
		}
		t.Cleanup(runRole(t, role, s.env(addr), os.Stderr))
		// Ready: the fan-out, which starts at the log's end, is then
		// assigned its partitions and pushes what comes after.
		waitHealthy(t, "http://"+addr+"/readyz")
	}
	base := "http://" + gw

	call := func(method, path, token, body string) (int, map[string]any) {
		t.Helper()
		st, b := api(t, method, base+path, token, body)
		var out map[string]any
		json.Unmarshal(b, &out)
		return st, out
	}
	if st, ans := call("POST", "/v1/admin/groups", "admin-token-0123456789", `{"gid":"team","members":["alice","bob"]}`); st != 200 {
		t.Fatalf("create the group: %d %v", st, ans)
	}
	token := func(uid string) string {
		tok, err := gateway.IssueToken([]byte(testSecret), uid, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	alice, bob := token("alice"), token("bob")
	waitMetric(t, "bob's membership projected", func() bool {
		_, ans := call("GET", "/v1/sync", bob, "")
		groups, _ := ans["groups"].([]any)
		return len(groups) == 1
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+gw+"/v1/ws?token="+bob, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	read := func() map[string]any {
		t.Helper()
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("bob's connection: %v", err)
		}
		var f map[string]any
		json.Unmarshal(b, &f)
		return f
	}
	if f := read(); f["op"] != "authed" {
		t.Fatalf("bob's first frame: %v", f)
	}
	if st, ans := call("POST", "/v1/groups/team/messages", alice, `{"cmid":"c-1","body":"over tls"}`); st != 200 {
		t.Fatalf("alice's send: %d %v", st, ans)
	}
	for {
		f := read()
		if f["op"] != "push" {
			continue
		}
		if !strings.Contains(string(mustJSON(f)), "over tls") {
			t.Fatalf("bob was pushed %v, want alice's message", f)
		}
		break
	}
	waitMetric(t, "alice's message in the window", func() bool {
		_, ans := call("GET", "/v1/groups/team/messages?after=-1", bob, "")
		return strings.Contains(string(mustJSON(ans)), "over tls")
	})
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// A login the brokers refuse, or a broker certificate no CA of the
// settings signed, stops the start at once and names what to set: waiting
// mends neither.
func TestARefusedKafkaLoginOrCertificateStopsTheStartSayingWhatToSet(t *testing.T) {
	s := newStoresOverTLS(t)
	for _, c := range []struct {
		what   string
		change map[string]string
		want   string
	}{
		{"the system's CAs only", map[string]string{"CHAT_KAFKA_CA_FILE": "", "CHAT_KAFKA_TLS": "true"}, "CHAT_KAFKA_CA_FILE"},
		{"Redis's certificate untrusted", map[string]string{"CHAT_REDIS_CA_FILE": "", "CHAT_REDIS_TLS": "true"}, "CHAT_REDIS_CA_FILE"},
		{"ClickHouse's certificate untrusted", map[string]string{"CHAT_CLICKHOUSE_ADDRS": s.clickhouse().SecureAddr, "CHAT_CLICKHOUSE_TLS": "true"}, "CHAT_CLICKHOUSE_CA_FILE"},
		{"a wrong SASL password", map[string]string{"CHAT_KAFKA_SASL_PASSWORD": "wrong"}, "CHAT_KAFKA_SASL_PASSWORD"},
	} {
		if c.what == "a wrong SASL password" {
			// kfake drops the connection on a wrong password; Apache
			// Kafka answers SASL_AUTHENTICATION_FAILED, as here.
			s.broker.Cluster().ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
				s.broker.Cluster().KeepControl()
				return &kmsg.SASLAuthenticateResponse{Version: req.GetVersion(), ErrorCode: kerr.SaslAuthenticationFailed.Code,
					ErrorMessage: kmsg.StringPtr("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")}, nil, true
			})
		}
		env := s.env(freeAddr(t))
		for k, v := range c.change {
			env[k] = v
		}
		done := make(chan error, 1)
		go func() {
			done <- runTo(context.Background(), []string{"projector"}, func(k string) string { return env[k] }, io.Discard)
		}()
		select {
		case err := <-done:
			t.Logf("%s: %v", c.what, err)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v; want an error naming %s", c.what, err, c.want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: the projector still waits after 15 s", c.what)
		}
	}
}

// A gateway serves HTTPS and wss:// itself with CHAT_TLS_CERT_FILE and
// CHAT_TLS_KEY_FILE, and takes a renewed certificate written over the
// files without a restart. A pair that does not load is refused at start.
func TestAGatewayServesTLSAndTakesARenewedCertificate(t *testing.T) {
	old := certCheckEvery
	certCheckEvery = 20 * time.Millisecond
	t.Cleanup(func() { certCheckEvery = old })
	first, second := testserver.NewTLS(t), testserver.NewTLS(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	install := func(f *testserver.TLSFiles) {
		t.Helper()
		for from, to := range map[string]string{f.CertFile: certFile, f.KeyFile: keyFile} {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(to, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	install(first)
	client := func(f *testserver.TLSFiles) *http.Client {
		ca, err := tlsclient.Config(f.CAFile, "test")
		if err != nil {
			t.Fatal(err)
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: ca}, Timeout: 5 * time.Second}
	}

	b := testserver.NewBroker(t)
	r := testserver.NewRedis(t)
	addr := freeAddr(t)
	env := map[string]string{"CHAT_HTTP_ADDR": addr, "CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_REDIS_ADDRS": r.Addr, "CHAT_PARTITIONS": "2",
		"CHAT_JWT_SECRET": testSecret, "CHAT_LOG_LEVEL": "warn", "CHAT_TLS_CERT_FILE": certFile, "CHAT_TLS_KEY_FILE": keyFile}
	t.Cleanup(runRole(t, "gateway", env, os.Stderr))
	waitMetric(t, "the gateway ready over HTTPS", func() bool {
		resp, err := client(first).Get("https://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tok, err := gateway.IssueToken([]byte(testSecret), "alice", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.Dial(ctx, "wss://"+addr+"/v1/ws?token="+tok, &websocket.DialOptions{HTTPClient: client(first)})
	if err != nil {
		t.Fatalf("wss:// to the gateway: %v", err)
	}
	if _, b, err := ws.Read(ctx); err != nil || !strings.Contains(string(b), `"authed"`) {
		t.Fatalf("wss:// first frame: %s %v", b, err)
	}
	ws.CloseNow()

	install(second)
	waitMetric(t, "the renewed certificate served", func() bool {
		resp, err := client(second).Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	})

	env["CHAT_TLS_KEY_FILE"] = first.CertFile // a certificate where the key goes
	err = runTo(context.Background(), []string{"gateway"}, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "CHAT_TLS_KEY_FILE") {
		t.Fatalf("a key file holding a certificate: %v, want a refusal naming CHAT_TLS_KEY_FILE", err)
	}
}
