package tlsclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
)

// Client makes the TLS connections of a store: it trusts the system's
// roots or the CAs of a CA file, and sends a client certificate to a
// server that asks for one, each taken anew from its files when they
// change (watched says how), so a CA rotated in place or a certificate
// renewed in place needs no restart. It is safe for concurrent use.
//
// The CA file is trusted as it is at each connection's handshake, in
// Dial: a library's tls.Config would hold the roots it was made with,
// and verifying in VerifyConnection instead cannot check a server
// dialled by IP address (127.0.0.1, the node addresses of a Redis
// cluster) against the address, which crypto/tls puts in no SNI and so
// passes to no callback. Dial knows the address, and leaves the check
// to crypto/tls, as strict as ever.
type Client struct {
	base  *tls.Config             // never changed: the version and the client certificate
	roots *watched[x509.CertPool] // nil: the system's roots
}

// Config is a config of the roots and client certificate as they are
// now, for a probe or a client of its own: it does not take a CA file
// written after. Nil for a nil Client (plaintext).
func (c *Client) Config() *tls.Config {
	if c == nil {
		return nil
	}
	cfg := c.base.Clone()
	if c.roots != nil {
		cfg.RootCAs = c.roots.get()
	}
	return cfg
}

// Dial is dial followed by a TLS handshake with the server at the
// address dialled, which must hold a certificate for the address's host
// (a name or an IP address) that the roots trust as they are then. ctx
// bounds the handshake too. The stores' libraries take it in place of
// their own TLS (kafka-go's Transport.Dial and Dialer.DialFunc,
// go-redis's Dialer, clickhouse-go's DialContext).
func (c *Client) Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := c.Config()
		cfg.ServerName = addr
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
		conn := tls.Client(raw, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

// loadRoots loads the CA file of setting (CHAT_KAFKA_CA_FILE...) to be
// read again when it changes; log, if not nil, is told of a change that
// does not load.
func loadRoots(caFile, setting string, log *slog.Logger) (*watched[x509.CertPool], error) {
	w := &watched[x509.CertPool]{
		files: []string{caFile},
		load:  func() (*x509.CertPool, error) { return readRoots(caFile, setting) },
		log:   log,
		what:  "the CA file of " + setting,
		keeps: "the CAs loaded before are trusted until it does: write the whole PEM bundle (a file written beside and renamed over), the new CA beside the old until every store's certificate is the new CA's",
	}
	if err := w.watch(); err != nil {
		return nil, err
	}
	return w, nil
}

// readRoots is the pool of the CA file of setting.
func readRoots(caFile, setting string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tlsclient: the CA file of %s: %w; name a readable PEM file of the CA certificates that sign the servers'", setting, err)
	}
	pool, err := parseRoots(b)
	switch {
	case errors.Is(err, errNoCertificate):
		return nil, fmt.Errorf("tlsclient: %s (%s) holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\"); name the CA certificates that sign the servers'", caFile, setting)
	case err != nil:
		return nil, fmt.Errorf("tlsclient: %s (%s): %w", caFile, setting, err)
	}
	return pool, nil
}

// errNoCertificate is a PEM bundle without a certificate.
var errNoCertificate = errors.New("tlsclient: no PEM certificate")

var beginLine = []byte("-----BEGIN")

// parseRoots is the pool of the CA certificates of data, a PEM bundle,
// taken as x509.CertPool.AppendCertsFromPEM takes them (blocks of other
// types skipped), but refused whole when a block does not decode: a file
// caught half written would otherwise trust the CAs of its first half
// only, and drop the others.
func parseRoots(data []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		block, after := pem.Decode(rest)
		if block == nil {
			if cutShort(rest) {
				return nil, errors.New("a PEM block is cut short or does not decode (the file caught half written?)")
			}
			break
		}
		// pem.Decode skips a block that does not decode, up to the next
		// that does: only one BEGIN line lies in what it took.
		if bytes.Count(rest[:len(rest)-len(after)], beginLine) != 1 {
			return nil, errors.New("a PEM block does not decode")
		}
		rest = after
		if block.Type != "CERTIFICATE" || len(block.Headers) != 0 {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			continue
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, errNoCertificate
	}
	return pool, nil
}

// cutShort tells the text after a bundle's last whole block that holds
// the start of another: a BEGIN line, or a line of dashes begun. Other
// text (comments, as some bundles have) is taken as AppendCertsFromPEM
// takes it.
func cutShort(rest []byte) bool {
	if bytes.Contains(rest, beginLine) {
		return true
	}
	for line := range bytes.Lines(rest) {
		if bytes.HasPrefix(bytes.TrimLeft(line, " \t"), []byte("-")) {
			return true
		}
	}
	return false
}
