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

	// A server that wants a client certificate: without one, its alert
	// names the settings; with CHAT_REDIS_CERT_FILE and _KEY_FILE the
	// connection goes through.
	mutual, err := tls.Listen("tcp", "127.0.0.1:0", f.Mutual)
	if err != nil {
		t.Fatal(err)
	}
	defer mutual.Close()
	go func() {
		for {
			c, err := mutual.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if c.(*tls.Conn).Handshake() == nil {
					c.Write([]byte("+OK\r\n"))
				}
			}()
		}
	}()
	read := func(c *tls.Config) error {
		conn, err := tls.Dial("tcp", mutual.Addr().String(), c)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Read(make([]byte, 8)) // TLS 1.3: the server's verdict comes after the handshake
		return err
	}
	if a := tlsclient.Advice(read(trusted), "CHAT_REDIS_TLS", "CHAT_REDIS_CA_FILE", "Redis's"); !strings.Contains(a, "set CHAT_REDIS_CERT_FILE and CHAT_REDIS_KEY_FILE") {
		t.Errorf("no client certificate for a server that wants one: advice %q", a)
	}
	withCert, err := (tlsclient.Files{CAFile: f.CAFile, CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile}).Config("CHAT_REDIS")
	if err != nil {
		t.Fatal(err)
	}
	if err := read(withCert); err != nil {
		t.Errorf("with the client certificate: %v", err)
	}
	if _, err := (tlsclient.Files{CertFile: f.ClientCertFile}).Config("CHAT_REDIS"); err == nil || !strings.Contains(err.Error(), "CHAT_REDIS_KEY_FILE") {
		t.Errorf("a client certificate without its key: %v, want an error naming CHAT_REDIS_KEY_FILE", err)
	}
	if c, err := (tlsclient.Files{}).Config("CHAT_REDIS"); c != nil || err != nil {
		t.Errorf("no TLS setting: %v, %v; want plaintext", c, err)
	}
}
