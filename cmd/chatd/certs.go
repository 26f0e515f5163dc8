package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// certCheckEvery is how often the certificate files are looked at for a
// renewal.
var certCheckEvery = 10 * time.Second

// certFiles serves the certificate of CHAT_TLS_CERT_FILE and
// CHAT_TLS_KEY_FILE and takes a renewed one (certbot, cert-manager write
// the files in place) without a restart: watch loads the files again when
// they change, away from the handshakes, which only read what it loaded
// (a file system that hangs stalls no handshake). A pair that does not
// load (caught half written) keeps the old one, with a warning, and is
// tried again at the next look.
type certFiles struct {
	certFile, keyFile string
	log               *slog.Logger

	cert atomic.Pointer[tls.Certificate]
	mod  time.Time // the files' newest modification when cert was loaded; watch's
}

// loadCerts loads the pair once, or says what is wrong with it.
func loadCerts(certFile, keyFile string, log *slog.Logger) (*certFiles, error) {
	c := &certFiles{certFile: certFile, keyFile: keyFile, log: log}
	cert, mod, err := c.load()
	if err != nil {
		return nil, err
	}
	c.cert.Store(cert)
	c.mod = mod
	return c, nil
}

func (c *certFiles) load() (*tls.Certificate, time.Time, error) {
	var mod time.Time
	for _, name := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return nil, mod, fmt.Errorf("TLS certificate: %w; set CHAT_TLS_CERT_FILE and CHAT_TLS_KEY_FILE to readable PEM files", err)
		}
		if fi.ModTime().After(mod) {
			mod = fi.ModTime()
		}
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, mod, fmt.Errorf("TLS certificate %s and key %s: %w; CHAT_TLS_CERT_FILE wants the certificate chain (PEM, the server's first) and CHAT_TLS_KEY_FILE its private key", c.certFile, c.keyFile, err)
	}
	return &cert, mod, nil
}

// watch loads the pair again whenever the files changed, until ctx ends.
func (c *certFiles) watch(ctx context.Context) {
	t := time.NewTicker(certCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cert, mod, err := c.load()
		switch {
		case err != nil:
			c.log.Warn("the TLS certificate files do not load; serving the one loaded before", "err", err)
		case !mod.Equal(c.mod):
			c.cert.Store(cert)
			c.mod = mod
			c.log.Info("serving a renewed TLS certificate", "file", c.certFile, "not_after", cert.Leaf.NotAfter)
		}
	}
}

// tlsConfig is the listener's: HTTP/1.1 only, which WebSocket upgrades
// need.
func (c *certFiles) tlsConfig() *tls.Config {
	return &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.cert.Load(), nil },
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"http/1.1"},
	}
}
