// Package tlsclient builds the TLS settings of chatd's connections to its
// stores (Kafka, Redis, ClickHouse): the system's roots, or the CAs of a
// PEM file that a deployment with a private CA names. The configs it
// returns are never changed after, so they are safe for concurrent use.
package tlsclient

import (
	"crypto/tls"
	"crypto/x509"
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
