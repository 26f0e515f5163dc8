package tlsclient_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/internal/tlsclient"
)

// What a new connection to a store pays for its TLS: a handshake with a
// loopback server, by a config of the CA file read at start (as the
// stores' libraries made it: a clone named for the host), and by a
// Client, which looks at the CA file again (a clock read and an atomic
// load between looks) and clones a config of the roots then. "config"
// is the per-connection work alone, without the handshake.
func BenchmarkHandshake(b *testing.B) {
	f := testserver.NewTLS(b)
	addr := serve(b, f.Server)
	static, err := tlsclient.Config(f.CAFile, "CHAT_REDIS_CA_FILE")
	if err != nil {
		b.Fatal(err)
	}
	c, err := (tlsclient.Files{CAFile: f.CAFile}).Client("CHAT_REDIS")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var d net.Dialer
	b.Run("read-at-start", func(b *testing.B) {
		for b.Loop() {
			raw, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			cfg := static.Clone()
			cfg.ServerName = "127.0.0.1"
			conn := tls.Client(raw, cfg)
			if err := conn.HandshakeContext(ctx); err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
	})
	b.Run("read-again", func(b *testing.B) {
		dial := c.Dial(d.DialContext)
		for b.Loop() {
			conn, err := dial(ctx, "tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			conn.Close()
		}
	})
	b.Run("config/read-at-start", func(b *testing.B) {
		for b.Loop() {
			cfg := static.Clone()
			cfg.ServerName = "127.0.0.1"
		}
	})
	b.Run("config/read-again", func(b *testing.B) {
		for b.Loop() {
			c.Config().ServerName = "127.0.0.1"
		}
	})
}
