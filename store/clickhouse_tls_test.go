package store

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

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
	tc, err := (tlsclient.Files{CAFile: f.CAFile}).Client("CHAT_CLICKHOUSE")
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

	system, err := (tlsclient.Files{On: true}).Client("CHAT_CLICKHOUSE")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := OpenClickHouse(ctx, ClickHouseConfig{Addrs: []string{srv.SecureAddr}, Database: "over_tls", TLS: system}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("open trusting the system's CAs only: %v, want a certificate error", err)
	}
}

// ClickHouse's CA rotated in place: CHAT_CLICKHOUSE_CA_FILE is written
// with the new CA beside the old, then the certificate of its secure port
// (here a TLS proxy in front of its native port) is renewed by the new
// CA. The store opened before reconnects, within the 10 s in which files
// are looked at again: no restart.
func TestClickHouseCARotatedInPlace(t *testing.T) {
	r := testserver.NewCARotation(t)
	proxy, cut := tlsProxy(t, r.Server, testserver.SharedClickHouse(t).Addr)
	tc, err := (tlsclient.Files{CAFile: r.CAFile}).Client("CHAT_CLICKHOUSE")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c, err := OpenClickHouse(ctx, ClickHouseConfig{Addrs: []string{proxy}, Database: "ca_rotated", TLS: tc, DialTimeout: time.Second})
	if err != nil {
		t.Fatalf("open over TLS: %v", err)
	}
	defer c.Close()
	if err := c.InsertMessages(ctx, 0, []schema.Message{{Gid: "g", MsgID: 7, Sender: "alice", Body: []byte("sealed"), SentAt: 1}}); err != nil {
		t.Fatal(err)
	}

	r.Bundle(t)
	r.Switch()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cut() // the connections open stay as they were: the next page dials again
		msgs, err := c.Messages(ctx, "g", -1, 10, 10)
		if err == nil && len(msgs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the certificate renewed by the new CA, both CAs in the CA file for 20 s: %v %v; want a page", msgs, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// tlsProxy serves TLS of c in front of the plaintext server at to, and
// returns its address and cut, which closes the connections open through
// it.
func tlsProxy(t *testing.T, c *tls.Config, to string) (addr string, cut func()) {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", c)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var open []net.Conn
	cut = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range open {
			conn.Close()
		}
		open = nil
	}
	t.Cleanup(func() { ln.Close(); cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			open = append(open, in, out)
			mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return ln.Addr().String(), cut
}
