package tlsclient_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/internal/tlsclient"
)

// A store's CA rotated in place: the CA file is written with the new CA
// beside the old, then the store's certificate is renewed by the new
// CA. A new connection of the client made before trusts it, without a
// restart; a client not due for a look at its files yet keeps the CAs it
// loaded.
func TestARotatedCAIsTrustedWithoutARestart(t *testing.T) {
	r := testserver.NewCARotation(t)
	tlsclient.SetRecheckEvery(t, time.Hour)
	slow, err := (tlsclient.Files{CAFile: r.CAFile}).Client("CHAT_REDIS")
	if err != nil {
		t.Fatal(err)
	}
	tlsclient.SetRecheckEvery(t, 0)
	c, err := (tlsclient.Files{CAFile: r.CAFile}).Client("CHAT_REDIS")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.Server)
	if err := dialAs(c, addr, addr); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	r.Bundle(t)
	if err := dialAs(c, addr, addr); err != nil {
		t.Fatalf("with both CAs in the file, the old certificate served: %v", err)
	}
	r.Switch()
	if err := dialAs(c, addr, addr); err != nil {
		t.Fatalf("the store's certificate renewed by the new CA: %v; want it trusted from the file written before", err)
	}
	if err := dialAs(slow, addr, addr); err == nil {
		t.Errorf("a client not due for a look at the file for an hour trusted the new CA; want the CAs it loaded")
	}

	// The rotation's end: the old CA taken out of the file is no longer
	// trusted.
	testserver.WriteOver(t, r.CAFile, readFile(t, r.New.CAFile))
	if err := dialAs(c, serve(t, r.Old.Server), addr); err == nil {
		t.Errorf("the old CA taken out of the file: a certificate it signed was still trusted")
	}
}

// After the CA file is read again the check stays as strict: a
// certificate must hold the host dialled and be signed by a CA of the
// file.
func TestARotatedCAStillChecksTheServersNameAndCA(t *testing.T) {
	r := testserver.NewCARotation(t)
	tlsclient.SetRecheckEvery(t, 0)
	c, err := (tlsclient.Files{CAFile: r.CAFile}).Client("CHAT_REDIS")
	if err != nil {
		t.Fatal(err)
	}
	r.Bundle(t)
	r.Switch()
	addr := serve(t, r.Server)
	if err := dialAs(c, addr, "localhost:6379"); err != nil {
		t.Fatalf("the new CA's certificate, dialled by a name it holds: %v", err)
	}
	for _, name := range []string{"127.0.0.2:6379", "redis.example.com:6379"} {
		err := dialAs(c, addr, name)
		if a := tlsclient.Advice(err, "CHAT_REDIS_TLS", "CHAT_REDIS_CA_FILE", "Redis's"); !strings.Contains(a, "certificate is for other names") {
			t.Errorf("dialled as %s, the new CA's certificate for 127.0.0.1 and localhost: %v, advice %q; want it refused as for other names", name, err, a)
		}
	}
	unknown := testserver.NewTLS(t)
	err = dialAs(c, serve(t, unknown.Server), addr)
	if a := tlsclient.Advice(err, "CHAT_REDIS_TLS", "CHAT_REDIS_CA_FILE", "Redis's"); !strings.Contains(a, "set CHAT_REDIS_CA_FILE") {
		t.Errorf("a certificate of a CA in no version of the file: %v, advice %q; want it refused as untrusted", err, a)
	}
}

// A CA file caught half written (the new CA first, the old cut short;
// or emptied before it is written) keeps the CAs loaded before, rather
// than trusting only those of its first half, and is told to the log
// once, with what to do; the whole file is taken at the next look.
func TestAHalfWrittenCAFileKeepsTheCAsBefore(t *testing.T) {
	r := testserver.NewCARotation(t)
	tlsclient.SetRecheckEvery(t, 0)
	var log bytes.Buffer
	c, err := (tlsclient.Files{CAFile: r.CAFile, Log: slog.New(slog.NewTextHandler(&log, nil))}).Client("CHAT_REDIS")
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.Server)
	old, added := readFile(t, r.Old.CAFile), readFile(t, r.New.CAFile)
	for _, half := range [][]byte{append(added, old[:len(old)/2]...), append(added, old[:12]...), append(added, old[:3]...), {}} {
		testserver.WriteOver(t, r.CAFile, half)
		for range 2 {
			if err := dialAs(c, addr, addr); err != nil {
				t.Fatalf("the file caught half written (%d bytes): %v; want the old CA still trusted", len(half), err)
			}
		}
	}
	if n := strings.Count(log.String(), "does not load"); n != 4 {
		t.Errorf("four half-written files looked at twice each: told %d times, want 4:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "CHAT_REDIS_CA_FILE") || !strings.Contains(log.String(), "the CAs loaded before are trusted until it does: write the whole PEM bundle") {
		t.Errorf("the log does not name the setting and what to do:\n%s", log.String())
	}

	r.Bundle(t)
	r.Switch()
	if err := dialAs(c, addr, addr); err != nil {
		t.Fatalf("the whole file written: %v; want the new CA trusted", err)
	}
	if !strings.Contains(log.String(), "loaded again") {
		t.Errorf("the log does not tell the file loaded:\n%s", log.String())
	}
}

// dialAs dials the server at addr through c as if dialled as name: the
// certificate is checked against name's host.
func dialAs(c *tlsclient.Client, addr, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dial := c.Dial(func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	})
	conn, err := dial(ctx, "tcp", name)
	if err == nil {
		conn.Close()
	}
	return err
}

// serve accepts TLS connections of c until the test ends, and returns
// their address.
func serve(t testing.TB, c *tls.Config) string {
	ln, err := tls.Listen("tcp", "127.0.0.1:0", c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				conn.(*tls.Conn).Handshake()
				conn.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

func readFile(t *testing.T, name string) []byte {
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
