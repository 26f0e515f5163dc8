package testserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/groupchat/chatd/broker"
)

// TLSFiles are a test CA and a server certificate it signed for
// 127.0.0.1 and localhost, as PEM files in a temp dir.
type TLSFiles struct {
	CAFile   string // the CA's certificate: what a client trusts
	CertFile string // the server's certificate
	KeyFile  string // the server's key
	Server   *tls.Config
}

// NewTLS makes a CA and a server certificate for loopback servers of the
// test (a broker, redis-server, a gateway).
func NewTLS(tb testing.TB) *TLSFiles {
	tb.Helper()
	dir := tb.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chatd test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	f := &TLSFiles{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	for name, block := range map[string]*pem.Block{
		f.CAFile:   {Type: "CERTIFICATE", Bytes: caDER},
		f.CertFile: {Type: "CERTIFICATE", Bytes: der},
		f.KeyFile:  {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(name, pem.EncodeToMemory(block), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		tb.Fatal(err)
	}
	f.Server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return f
}

// NewBrokerTLS starts an embedded broker for the test that speaks TLS
// with f's certificate only and takes the login of u only, as a managed
// Kafka's SASL_SSL listener, and closes it when the test ends.
func NewBrokerTLS(tb testing.TB, f *TLSFiles, u broker.User) *broker.Broker {
	tb.Helper()
	b, err := broker.Start(broker.Config{TLS: f.Server, Users: []broker.User{u}})
	if err != nil {
		tb.Fatalf("testserver: start the embedded broker over TLS: %v", err)
	}
	tb.Cleanup(b.Close)
	return b
}
