package tlsclient

import (
	"crypto/tls"
	"log/slog"
)

// clientCert is the client certificate of a config, taken anew from its
// files when they change (watched says how).
type clientCert struct {
	pair watched[tls.Certificate]
}

// loadClientCert loads the pair of certFile and keyFile, or returns
// tls.LoadX509KeyPair's error. prefix names the settings in the log
// ("CHAT_KAFKA").
func loadClientCert(certFile, keyFile, prefix string, log *slog.Logger) (*clientCert, error) {
	c := &clientCert{pair: watched[tls.Certificate]{
		files: []string{certFile, keyFile},
		load: func() (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			return &cert, err
		},
		log:   log,
		what:  "the client certificate of " + prefix + "_CERT_FILE and " + prefix + "_KEY_FILE",
		keeps: "the pair loaded before is sent until it does: write the certificate and its own key, each file whole (a file written beside and renamed over)",
	}}
	if err := c.pair.watch(); err != nil {
		return nil, err
	}
	return c, nil
}

// get is the config's GetClientCertificate. It sends the pair only if
// the server can take it, as crypto/tls chooses among
// tls.Config.Certificates: else none, and the server's alert says so.
func (c *clientCert) get(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cert := c.pair.get()
	if cri.SupportsCertificate(cert) != nil {
		return new(tls.Certificate), nil
	}
	return cert, nil
}
