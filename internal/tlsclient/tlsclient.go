// Package tlsclient builds the TLS settings of chatd's connections to its
// stores (Kafka, Redis, ClickHouse): the system's roots, or the CAs of a
// PEM file that a deployment with a private CA names. The configs it
// returns are never changed after, so they are safe for concurrent use.
package tlsclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Config returns the TLS config of a client that trusts the system's roots,
// or with caFile those of the PEM file only. setting names caFile's
// setting (CHAT_KAFKA_CA_FILE...) in errors.
func Config(caFile, setting string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return c, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tlsclient: the CA file of %s: %w; name a readable PEM file of the CA certificates that sign the servers'", setting, err)
	}
	c.RootCAs = x509.NewCertPool()
	if !c.RootCAs.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tlsclient: %s (%s) holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\"); name the CA certificates that sign the servers'", caFile, setting)
	}
	return c, nil
}

// For is Config when a store's TLS is on (on, or a CA file named, which
// implies it), and nil (plaintext) when it is off.
func For(on bool, caFile, setting string) (*tls.Config, error) {
	if !on && caFile == "" {
		return nil, nil
	}
	return Config(caFile, setting)
}

// Failed tells a TLS handshake that failed on certificates or on the
// protocol (a plaintext server), which waiting does not mend.
func Failed(err error) bool {
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &header) || errors.As(err, &unknown) || errors.As(err, &host)
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
	switch {
	case errors.As(err, &header):
		return fmt.Sprintf(": the server does not speak TLS; unset %s and %s, or name its TLS port", tlsEnv, caEnv)
	case errors.As(err, &host):
		return fmt.Sprintf(": %s certificate is for other names; give the address by a name it holds", whose)
	case Failed(err):
		return fmt.Sprintf(": %s certificate is not trusted; set %s to a PEM file of the CA that signs it", whose, caEnv)
	}
	return ""
}
