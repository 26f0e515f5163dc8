package tlsclient

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// A CA file's bytes: whatever parseRoots takes, it takes as
// x509.CertPool.AppendCertsFromPEM would (the same CAs, never others),
// and it never panics.
func FuzzParseRoots(f *testing.F) {
	bundle := caBundle(f)
	f.Add(bundle)
	f.Add(bundle[:len(bundle)/2])
	f.Add([]byte("# a comment\n" + string(bundle) + "# trailing\n"))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		pool, err := parseRoots(data)
		if err != nil {
			return
		}
		ref := x509.NewCertPool()
		if !ref.AppendCertsFromPEM(data) {
			t.Fatalf("parseRoots took %q, which holds no certificate", data)
		}
		if !pool.Equal(ref) {
			t.Fatalf("parseRoots of %q: other CAs than AppendCertsFromPEM's", data)
		}
	})
}

// Every prefix of a bundle of two CAs, as a file caught half written
// holds: refused, or the CAs of its whole blocks, never a CA cut short
// dropped silently beside them.
func TestEveryPrefixOfABundleIsRefusedOrWhole(t *testing.T) {
	bundle := caBundle(t)
	end := bytes.Index(bundle, []byte("-----END CERTIFICATE-----\n")) + len("-----END CERTIFICATE-----\n")
	first := x509.NewCertPool()
	first.AppendCertsFromPEM(bundle[:end])
	for n := range len(bundle) + 1 {
		pool, err := parseRoots(bundle[:n])
		switch {
		case n == len(bundle) || n == len(bundle)-1: // whole, with or without the last newline
			if err != nil {
				t.Fatalf("the whole bundle (%d of %d bytes): %v", n, len(bundle), err)
			}
		case n < end-1:
			if err == nil {
				t.Fatalf("%d bytes, the first CA cut short: taken", n)
			}
		case err == nil && !pool.Equal(first):
			t.Fatalf("%d bytes, the first CA whole and the second cut short: taken with other CAs than the first alone", n)
		case n > end && err == nil:
			t.Fatalf("%d bytes, the second CA cut short (%q...): taken as the first alone", n, bundle[end:n])
		}
	}
}

// caBundle is the PEM of two CAs, one after the other.
func caBundle(tb testing.TB) []byte {
	var b []byte
	for i := range 2 {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 1)), Subject: pkix.Name{CommonName: "chatd test CA"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			tb.Fatal(err)
		}
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return b
}
