package tlsclient_test

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/internal/tlsclient"
)

// Each way a handshake fails is told with the setting that mends it: a
// plaintext server, a certificate for other names, one no trusted CA
// signed. Other errors get no advice.
func TestAdviceNamesWhatMendsAFailedHandshake(t *testing.T) {
	f := testserver.NewTLS(t)
	secure, err := tls.Listen("tcp", "127.0.0.1:0", f.Server)
	if err != nil {
		t.Fatal(err)
	}
	defer secure.Close()
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, ln := range []net.Listener{secure, plain} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					if _, ok := c.(*tls.Conn); ok {
						c.(*tls.Conn).Handshake()
						return
					}
					c.Write([]byte("-ERR unknown command\r\n")) // as Redis answers a ClientHello
					c.Read(make([]byte, 1024))
				}()
			}
		}()
	}
	trusted, err := tlsclient.Config(f.CAFile, "CHAT_REDIS_CA_FILE")
	if err != nil {
		t.Fatal(err)
	}
	system, err := tlsclient.Config("", "CHAT_REDIS_CA_FILE")
	if err != nil {
		t.Fatal(err)
	}
	handshake := func(addr string, c *tls.Config) error {
		conn, err := tls.Dial("tcp", addr, c)
		if err == nil {
			conn.Close()
		}
		return err
	}
	other := trusted.Clone()
	other.ServerName = "redis.example.com"
	for _, c := range []struct {
		what string
		err  error
		want string
	}{
		{"a plaintext server", handshake(plain.Addr().String(), trusted), "does not speak TLS; unset CHAT_REDIS_TLS and CHAT_REDIS_CA_FILE"},
		{"a certificate for other names", handshake(secure.Addr().String(), other), "certificate is for other names"},
		{"a certificate of an unknown CA", handshake(secure.Addr().String(), system), "set CHAT_REDIS_CA_FILE"},
		{"no TLS error", net.ErrClosed, ""},
	} {
		got := tlsclient.Advice(c.err, "CHAT_REDIS_TLS", "CHAT_REDIS_CA_FILE", "Redis's")
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s (%v): advice %q, want %q", c.what, c.err, got, c.want)
		}
	}
	if err := handshake(secure.Addr().String(), trusted); err != nil {
		t.Fatalf("a trusted certificate for its address: %v", err)
	}
}
