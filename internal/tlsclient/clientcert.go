package tlsclient

import (
	"crypto/tls"
	"os"
	"sync/atomic"
	"time"
)

// recheckEvery is how often, at most, the files of a client certificate
// are looked at for a renewal. A config takes it when it is made.
var recheckEvery = 10 * time.Second

// lookWait bounds how long the handshake that starts a look waits for
// it before it sends the pair loaded before.
var lookWait = time.Second

// clientCert is the client certificate of a config, taken anew from its
// files when they change (cert-manager, Vault or a cron renewing them in
// place), so a renewal needs no restart.
//
// The handshakes themselves start the looks, rather than a goroutine
// watching the files as the gateway's own certificate has (cmd/chatd):
// a config has no lifecycle that could stop one, and chatd makes some
// only to check the settings. A handshake due for a look (one per
// recheckEvery at most) starts it in a goroutine of its own and waits
// for it up to lookWait, so a file system that hangs holds it up that
// long and no other handshake at all; the others meanwhile send the pair
// loaded before. A pair that does not load (caught half written, a key
// of another certificate) keeps the one loaded before, and is tried
// again at the next look. Renewed files are told by their modification
// time and size (a Kubernetes secret's symlink swap too: os.Stat follows
// it).
type clientCert struct {
	certFile, keyFile string
	every             time.Duration

	cert    atomic.Pointer[tls.Certificate]
	next    atomic.Int64 // when the files are due for a look, in Unix nanoseconds
	looking atomic.Bool  // a look runs; stamp is its own meanwhile
	stamp   [2]fileStamp // the files' when cert was loaded
}

// fileStamp tells a file written again.
type fileStamp struct {
	mod  int64 // Unix nanoseconds
	size int64
}

// loadClientCert loads the pair of certFile and keyFile, or returns
// tls.LoadX509KeyPair's error.
func loadClientCert(certFile, keyFile string) (*clientCert, error) {
	c := &clientCert{certFile: certFile, keyFile: keyFile, every: recheckEvery}
	c.stamp = c.stat() // before the load: files changed in between are loaded again at the first look
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	c.cert.Store(&cert)
	c.next.Store(time.Now().Add(c.every).UnixNano())
	return c, nil
}

// get is the config's GetClientCertificate. It sends the pair only if
// the server can take it, as crypto/tls chooses among
// tls.Config.Certificates: else none, and the server's alert says so.
func (c *clientCert) get(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c.recheck()
	cert := c.cert.Load()
	if cri.SupportsCertificate(cert) != nil {
		return new(tls.Certificate), nil
	}
	return cert, nil
}

// recheck looks at the files when due and no other look runs.
func (c *clientCert) recheck() {
	now := time.Now()
	if now.UnixNano() < c.next.Load() || !c.looking.CompareAndSwap(false, true) {
		return
	}
	c.next.Store(now.Add(c.every).UnixNano())
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer c.looking.Store(false) // before done: a handshake right after this one may look again
		c.look()
	}()
	t := time.NewTimer(lookWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// look loads the pair again if its files changed since it was loaded.
func (c *clientCert) look() {
	stamp := c.stat()
	if stamp == c.stamp {
		return
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return // the pair loaded before stays; stamp unchanged, so the next look tries again
	}
	c.cert.Store(&cert)
	c.stamp = stamp
}

// stat is the files' stamps; a zero one for a file that cannot be read,
// which differs from any loaded, so the load is tried.
func (c *clientCert) stat() [2]fileStamp {
	var s [2]fileStamp
	for i, name := range []string{c.certFile, c.keyFile} {
		if fi, err := os.Stat(name); err == nil {
			s[i] = fileStamp{mod: fi.ModTime().UnixNano(), size: fi.Size()}
		}
	}
	return s
}
