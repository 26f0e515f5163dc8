package store

import (
	"strings"
	"testing"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/internal/tlsclient"
	"github.com/groupchat/chatd/schema"
)

// A ClickHouse reached on its secure native port (a managed ClickHouse
// takes no other) migrates, takes an insert and answers a page over TLS;
// its certificate is checked: without the CA that signed it, the open
// fails on the certificate.
func TestClickHouseOverTLS(t *testing.T) {
	f := testserver.NewTLS(t)
	srv := testserver.NewClickHouse(t, testserver.SecurePort(f))
	ctx := t.Context()
	tc, err := tlsclient.Config(f.CAFile, "CHAT_CLICKHOUSE_CA_FILE")
	if err != nil {
		t.Fatal(err)
	}
	c, err := OpenClickHouse(ctx, ClickHouseConfig{Addrs: []string{srv.SecureAddr}, Database: "over_tls", TLS: tc})
	if err != nil {
		t.Fatalf("open over TLS: %v", err)
	}
	defer c.Close()
	if err := c.InsertMessages(ctx, 0, []schema.Message{{Gid: "g", MsgID: 7, Sender: "alice", Body: []byte("sealed"), SentAt: 1}}); err != nil {
		t.Fatal(err)
	}
	msgs, err := c.Messages(ctx, "g", -1, 10, 10)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "sealed" {
		t.Fatalf("a page over TLS: %v %v", msgs, err)
	}

	system, err := tlsclient.Config("", "CHAT_CLICKHOUSE_CA_FILE")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenClickHouse(ctx, ClickHouseConfig{Addrs: []string{srv.SecureAddr}, Database: "over_tls", TLS: system}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("open trusting the system's CAs only: %v, want a certificate error", err)
	}
}
