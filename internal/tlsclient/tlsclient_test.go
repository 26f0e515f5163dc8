package tlsclient_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	withCert, err := (tlsclient.Files{CAFile: f.CAFile, CertFile: f.ClientCertFile, KeyFile: f.ClientKeyFile}).Client("CHAT_REDIS")
	if err != nil {
		t.Fatal(err)
	}
	if err := read(withCert.Config()); err != nil {
		t.Errorf("with the client certificate: %v", err)
	}
	if _, err := (tlsclient.Files{CertFile: f.ClientCertFile}).Client("CHAT_REDIS"); err == nil || !strings.Contains(err.Error(), "CHAT_REDIS_KEY_FILE") {
		t.Errorf("a client certificate without its key: %v, want an error naming CHAT_REDIS_KEY_FILE", err)
	}
	if c, err := (tlsclient.Files{}).Client("CHAT_REDIS"); c != nil || err != nil {
		t.Errorf("no TLS setting: %v, %v; want plaintext", c, err)
	}
}

// A client certificate renewed in place (cert-manager, Vault, a cron
// writing the files) is sent from the next connection after the files are
// looked at again, without a restart; a config that is not due for a look
// yet sends the one it loaded.
func TestARenewedClientCertificateIsSentWithoutARestart(t *testing.T) {
	r := newRenewal(t)
	slow, quick := r.config(t, time.Hour), r.config(t, 0)
	f2, certFile, keyFile, dial, first, renewed := r.f2, r.certFile, r.keyFile, r.dial, r.first, r.renewed
	for _, c := range []*tls.Config{slow, quick} {
		if got, err := dial(c); err != nil || !got.Equal(first) {
			t.Fatalf("before the renewal: the server saw %v (%v); want the first certificate", which(got, first, renewed), err)
		}
	}

	writeOver(t, certFile, f2.ClientCertFile)
	writeOver(t, keyFile, f2.ClientKeyFile)
	if got, err := dial(quick); err != nil || !got.Equal(renewed) {
		t.Errorf("after the renewal: the server saw %v (%v); want the renewed certificate, of the other CA", which(got, first, renewed), err)
	}
	if got, err := dial(slow); err != nil || !got.Equal(first) {
		t.Errorf("after the renewal, with the files not due for a look for an hour: the server saw %v (%v); want the first certificate", which(got, first, renewed), err)
	}
}

// A pair caught half written, or a certificate beside the key of the one
// before, keeps the pair loaded before; the whole pair is taken at the
// next look.
func TestAHalfWrittenClientCertificateKeepsTheOneBefore(t *testing.T) {
	r := newRenewal(t)
	c := r.config(t, 0)
	f2, certFile, keyFile, dial, first, renewed := r.f2, r.certFile, r.keyFile, r.dial, r.first, r.renewed

	pem, err := os.ReadFile(f2.ClientCertFile)
	if err != nil {
		t.Fatal(err)
	}
	testserver.WriteOver(t, certFile, pem[:len(pem)/2])
	if got, err := dial(c); err != nil || !got.Equal(first) {
		t.Errorf("with half the renewed certificate written: the server saw %v (%v); want the first certificate", which(got, first, renewed), err)
	}
	writeOver(t, certFile, f2.ClientCertFile)
	if got, err := dial(c); err != nil || !got.Equal(first) {
		t.Errorf("with the renewed certificate beside the key before: the server saw %v (%v); want the first certificate", which(got, first, renewed), err)
	}
	writeOver(t, keyFile, f2.ClientKeyFile)
	if got, err := dial(c); err != nil || !got.Equal(renewed) {
		t.Errorf("with the whole renewed pair written: the server saw %v (%v); want the renewed certificate", which(got, first, renewed), err)
	}
}

// With a CA file named, the server's certificate must still hold the
// host of the address dialled, a name or an IP address (for which
// crypto/tls puts no SNI), and be signed by the file's CA.
func TestTheCAFileStillChecksTheServersNameAndCA(t *testing.T) {
	f1, f2 := testserver.NewTLS(t), testserver.NewTLS(t)
	c, err := (tlsclient.Files{CAFile: f1.CAFile}).Client("CHAT_REDIS")
	if err != nil {
		t.Fatal(err)
	}
	one, other := serve(t, f1.Server), serve(t, f2.Server)
	// handshake dials the server at addr as if dialled as name: the
	// certificate is checked against name's host.
	handshake := func(addr, name string) error {
		return dialAs(c, addr, name)
	}
	for _, name := range []string{"127.0.0.1:6379", "localhost:6379"} {
		if err := handshake(one, name); err != nil {
			t.Fatalf("a certificate of the CA file for the address dialled (%s): %v", name, err)
		}
	}
	for _, name := range []string{"127.0.0.2:6379", "redis.example.com:6379", "[::1]:6379"} {
		err := handshake(one, name)
		if a := tlsclient.Advice(err, "CHAT_REDIS_TLS", "CHAT_REDIS_CA_FILE", "Redis's"); !tlsclient.Failed(err) || !strings.Contains(a, "certificate is for other names") {
			t.Errorf("dialled as %s, a certificate for 127.0.0.1 and localhost: %v, advice %q; want it refused as for other names", name, err, a)
		}
	}
	err = handshake(other, "127.0.0.1:6379")
	if a := tlsclient.Advice(err, "CHAT_REDIS_TLS", "CHAT_REDIS_CA_FILE", "Redis's"); !tlsclient.Failed(err) || !strings.Contains(a, "set CHAT_REDIS_CA_FILE") {
		t.Errorf("a certificate of another CA: %v, advice %q; want it refused as untrusted", err, a)
	}
}

// renewal is a client certificate of one CA (first) in files of its
// own, the pair of another (renewed) to write over them, and dial, to a
// server that trusts both and says which it saw.
type renewal struct {
	f1, f2            *testserver.TLSFiles
	certFile, keyFile string
	dial              func(*tls.Config) (*x509.Certificate, error)
	first, renewed    *x509.Certificate
}

func newRenewal(t *testing.T) renewal {
	r := renewal{f1: testserver.NewTLS(t), f2: testserver.NewTLS(t)}
	r.certFile, r.keyFile = clientFiles(t, r.f1)
	r.dial = mutualServer(t, r.f1, r.f1, r.f2)
	r.first, r.renewed = certOf(t, r.f1.ClientCertFile), certOf(t, r.f2.ClientCertFile)
	return r
}

// config is the client config of r's files, which it looks at again for
// a renewal at most every every.
func (r renewal) config(t *testing.T, every time.Duration) *tls.Config {
	t.Helper()
	tlsclient.SetRecheckEvery(t, every)
	c, err := (tlsclient.Files{CAFile: r.f1.CAFile, CertFile: r.certFile, KeyFile: r.keyFile}).Client("CHAT_REDIS")
	if err != nil {
		t.Fatal(err)
	}
	return c.Config()
}

// mutualServer serves f's certificate to clients with a certificate one
// of trust's CAs signed. Its dial connects with a config and returns the
// client certificate the server saw (nil: the handshake failed).
func mutualServer(t *testing.T, f *testserver.TLSFiles, trust ...*testserver.TLSFiles) func(*tls.Config) (*x509.Certificate, error) {
	t.Helper()
	sc := f.Mutual.Clone()
	sc.ClientCAs = x509.NewCertPool()
	for _, tf := range trust {
		pem, err := os.ReadFile(tf.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		sc.ClientCAs.AppendCertsFromPEM(pem)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	seen := make(chan *x509.Certificate, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			var cert *x509.Certificate
			if tc.Handshake() == nil {
				cert = tc.ConnectionState().PeerCertificates[0]
				tc.Write([]byte("+OK\r\n"))
			}
			c.Close()
			seen <- cert
		}
	}()
	return func(c *tls.Config) (*x509.Certificate, error) {
		conn, err := tls.Dial("tcp", ln.Addr().String(), c)
		if err == nil {
			_, err = conn.Read(make([]byte, 8)) // TLS 1.3: the server's verdict comes after the handshake
			conn.Close()
		}
		return <-seen, err
	}
}

// clientFiles are copies of f's client certificate and key, for a test
// to write over.
func clientFiles(t *testing.T, f *testserver.TLSFiles) (certFile, keyFile string) {
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	for dst, src := range map[string]string{certFile: f.ClientCertFile, keyFile: f.ClientKeyFile} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// writeOver writes the content of src over dst, in place.
func writeOver(t *testing.T, dst, src string) {
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	testserver.WriteOver(t, dst, b)
}

func certOf(t *testing.T, file string) *x509.Certificate {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		t.Fatalf("%s holds no PEM block", file)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// which tells the client certificate a server saw: first (the one the
// config loaded), renewed, or another.
func which(c, first, renewed *x509.Certificate) string {
	switch {
	case c == nil:
		return "no certificate"
	case c.Equal(first):
		return "the first certificate"
	case c.Equal(renewed):
		return "the renewed certificate"
	}
	return "the certificate of " + c.Subject.CommonName
}
