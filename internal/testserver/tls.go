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
	"sync/atomic"
	"testing"
	"time"

	"github.com/groupchat/chatd/broker"
)

// TLSFiles are a test CA, a server certificate it signed for 127.0.0.1
// and localhost, and a client certificate it signed (mutual TLS), as PEM
// files in a temp dir.
type TLSFiles struct {
	CAFile         string // the CA's certificate: what a client trusts
	CertFile       string // the server's certificate
	KeyFile        string // the server's key
	ClientCertFile string // a client's certificate, for servers that ask for one
	ClientKeyFile  string
	Server         *tls.Config // serves CertFile; asks no client certificate
	Mutual         *tls.Config // serves CertFile; requires a client certificate the CA signed
}

// NewTLS makes a CA and the certificates of TLSFiles for loopback servers
// of the test (a broker, redis-server, a gateway) and their clients.
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
	write := func(name string, block *pem.Block) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			tb.Fatal(err)
		}
		return path
	}
	// issue writes a certificate the CA signed, and its key.
	issue := func(name string, serial int64, tmpl *x509.Certificate) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			tb.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			tb.Fatal(err)
		}
		return write(name+".pem", &pem.Block{Type: "CERTIFICATE", Bytes: der}), write(name+"-key.pem", &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	}
	f := &TLSFiles{CAFile: write("ca.pem", &pem.Block{Type: "CERTIFICATE", Bytes: caDER})}
	f.CertFile, f.KeyFile = issue("server", 2, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	f.ClientCertFile, f.ClientKeyFile = issue("client", 3, &x509.Certificate{Subject: pkix.Name{CommonName: "chatd"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		tb.Fatal(err)
	}
	f.Server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	f.Mutual = f.Server.Clone()
	f.Mutual.ClientAuth, f.Mutual.ClientCAs = tls.RequireAndVerifyClientCert, x509.NewCertPool()
	f.Mutual.ClientCAs.AddCert(ca)
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

// NewBrokerMutualTLS starts an embedded broker for the test that takes
// TLS connections with a client certificate f's CA signed only, as
// Aiven's Kafka does by default, and closes it when the test ends.
func NewBrokerMutualTLS(tb testing.TB, f *TLSFiles) *broker.Broker {
	tb.Helper()
	b, err := broker.Start(broker.Config{TLS: f.Mutual})
	if err != nil {
		tb.Fatalf("testserver: start the embedded broker over mutual TLS: %v", err)
	}
	tb.Cleanup(b.Close)
	return b
}

// CARotation is a store's CA rotation: the CA file a client trusts, at
// first of Old's CA alone, and Server, a config that serves Old's
// certificate until Switch. Bundle writes both CAs into the file (the
// rotation's first step); Switch makes Server serve New's certificate,
// signed by the new CA (the store renewed by it).
type CARotation struct {
	Old, New *TLSFiles
	CAFile   string
	Server   *tls.Config

	cert atomic.Pointer[tls.Certificate]
}

// NewCARotation makes two CAs and the files of a rotation from the one
// to the other.
func NewCARotation(tb testing.TB) *CARotation {
	tb.Helper()
	r := &CARotation{Old: NewTLS(tb), New: NewTLS(tb), CAFile: filepath.Join(tb.TempDir(), "ca.pem")}
	r.cert.Store(&r.Old.Server.Certificates[0])
	r.Server = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return r.cert.Load(), nil
	}}
	if err := os.WriteFile(r.CAFile, r.pem(tb, r.Old), 0o600); err != nil {
		tb.Fatal(err)
	}
	return r
}

// Bundle writes the old CA and the new one over the CA file.
func (r *CARotation) Bundle(tb testing.TB) {
	tb.Helper()
	WriteOver(tb, r.CAFile, append(r.pem(tb, r.Old), r.pem(tb, r.New)...))
}

// Switch makes Server serve the certificate the new CA signed.
func (r *CARotation) Switch() { r.cert.Store(&r.New.Server.Certificates[0]) }

func (r *CARotation) pem(tb testing.TB, f *TLSFiles) []byte {
	b, err := os.ReadFile(f.CAFile)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// WriteOver writes b over file, in place, and moves its modification
// time on by a second: written within the clock tick of the write before
// (a file system of coarse times), it would look unchanged, as a file
// renewed hours later does not.
func WriteOver(tb testing.TB, file string, b []byte) {
	tb.Helper()
	fi, err := os.Stat(file)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	mod := fi.ModTime().Add(time.Second)
	if err := os.Chtimes(file, mod, mod); err != nil {
		tb.Fatal(err)
	}
}
