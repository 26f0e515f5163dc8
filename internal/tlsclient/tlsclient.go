// Package tlsclient builds the TLS of chatd's connections to its stores
// (Kafka, Redis, ClickHouse): the system's roots, or the CAs of a PEM
// file that a deployment with a private CA names, and a client
// certificate for a server that asks for one. A Client takes both anew
// from their files when those change in place (a CA rotated, a
// certificate renewed), at a new connection, so neither needs a restart;
// connections open stay as they are. Its methods are safe for concurrent
// use, and the configs it hands out are never changed after.
package tlsclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
)

// Config returns the TLS config of a client that trusts the system's roots,
// or with caFile those of the PEM file only, as it is now: for a probe or
// a client of its own (a store's connections take a Client, which reads
// the file again). setting names caFile's setting (CHAT_KAFKA_CA_FILE...)
// in errors.
func Config(caFile, setting string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return c, nil
	}
	var err error
	if c.RootCAs, err = readRoots(caFile, setting); err != nil {
		return nil, err
	}
	return c, nil
}

// Files are a store's TLS settings: TLS on, a CA file to trust instead
// of the system's roots, and a client certificate and its key for a
// server that asks for one (mutual TLS, as Aiven's Kafka or a Redis with
// tls-auth-clients). A file named turns TLS on.
type Files struct {
	On                        bool
	CAFile, CertFile, KeyFile string
	Log                       *slog.Logger // told of files changed that do not load; nil: nowhere
}

// Client is the TLS client of f, or nil (plaintext) when TLS is off.
// prefix names the settings in errors: "CHAT_KAFKA" for CHAT_KAFKA_TLS,
// CHAT_KAFKA_CA_FILE, CHAT_KAFKA_CERT_FILE and CHAT_KAFKA_KEY_FILE.
func (f Files) Client(prefix string) (*Client, error) {
	if !f.On && f.CAFile == "" && f.CertFile == "" && f.KeyFile == "" {
		return nil, nil
	}
	c := &Client{base: &tls.Config{MinVersion: tls.VersionTLS12}}
	if f.CAFile != "" {
		var err error
		if c.roots, err = loadRoots(f.CAFile, prefix+"_CA_FILE", f.Log); err != nil {
			return nil, err
		}
	}
	switch {
	case (f.CertFile == "") != (f.KeyFile == ""):
		return nil, fmt.Errorf("tlsclient: %s_CERT_FILE %q and %s_KEY_FILE %q: a client certificate needs both, or neither", prefix, f.CertFile, prefix, f.KeyFile)
	case f.CertFile != "":
		cert, err := loadClientCert(f.CertFile, f.KeyFile, prefix, f.Log)
		if err != nil {
			return nil, fmt.Errorf("tlsclient: the client certificate of %s_CERT_FILE and %s_KEY_FILE: %w; name the certificate (PEM) the server's CA signed for this client and its private key", prefix, prefix, err)
		}
		c.base.GetClientCertificate = cert.get
	}
	return c, nil
}

// certificateAsked tells a server's alert that it wants a client
// certificate: none was sent, or one it does not take. crypto/tls
// exports no type for an alert received over TCP.
func certificateAsked(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "remote error" {
		return false
	}
	msg := op.Err.Error()
	return strings.HasSuffix(msg, "certificate required") || strings.HasSuffix(msg, "bad certificate") || strings.HasSuffix(msg, "unknown certificate authority")
}

// Failed tells a TLS handshake that failed on certificates or on the
// protocol (a plaintext server), which waiting does not mend.
func Failed(err error) bool {
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &header) || errors.As(err, &unknown) || errors.As(err, &host) || certificateAsked(err)
}

// Hint is err with Advice added.
func Hint(err error, tlsEnv, caEnv, whose string) error {
	if a := Advice(err, tlsEnv, caEnv, whose); a != "" {
		return fmt.Errorf("%w%s", err, a)
	}
	return err
}

// Advice says which settings mend err when it is a failed TLS handshake,
// as text to follow it ("" for other errors). tlsEnv and caEnv name the
// store's settings (CHAT_REDIS_TLS, CHAT_REDIS_CA_FILE), whose its
// certificate ("Redis's").
func Advice(err error, tlsEnv, caEnv, whose string) string {
	var header tls.RecordHeaderError
	var host x509.HostnameError
	prefix := strings.TrimSuffix(tlsEnv, "_TLS")
	switch {
	case certificateAsked(err):
		return fmt.Sprintf(": the server wants a client certificate its CA signed; set %s_CERT_FILE and %s_KEY_FILE", prefix, prefix)
	case errors.As(err, &header):
		return fmt.Sprintf(": the server does not speak TLS; unset %s and %s, or name its TLS port", tlsEnv, caEnv)
	case errors.As(err, &host):
		return fmt.Sprintf(": %s certificate is for other names; give the address by a name it holds", whose)
	case Failed(err):
		return fmt.Sprintf(": %s certificate is not trusted; set %s to a PEM file of the CA that signs it", whose, caEnv)
	}
	return ""
}
