package topics

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
)

// The settings of Security are checked before any connection: each
// mistake is refused naming the variable to set, and a plain login
// without TLS is told apart.
func TestNewSecuritySaysWhichSettingIsWrong(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s    SecuritySettings
		want string
	}{
		{SecuritySettings{Mechanism: "gssapi", User: "u", Password: "p"}, "CHAT_KAFKA_SASL=\"gssapi\" is no mechanism"},
		// Without a user: the name is refused first, not followed by
		// "needs a user and a password", which set was refused as no mechanism.
		{SecuritySettings{Mechanism: "scram"}, "CHAT_KAFKA_SASL=\"scram\" is no mechanism chatd speaks; use one of plain, scram-sha-256, scram-sha-512"},
		{SecuritySettings{Mechanism: "plain", User: "u"}, "CHAT_KAFKA_SASL_PASSWORD"},
		{SecuritySettings{Mechanism: "scram-sha-256", Password: "p"}, "CHAT_KAFKA_SASL_USER"},
		{SecuritySettings{User: "u", Password: "p"}, "set CHAT_KAFKA_SASL"},
		{SecuritySettings{CAFile: filepath.Join(t.TempDir(), "missing.pem")}, "CHAT_KAFKA_CA_FILE"},
		{SecuritySettings{CAFile: notPEM}, "holds no PEM certificate"},
	} {
		if _, err := NewSecurity(c.s); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.s, err, c.want)
		}
	}
	for _, c := range []struct {
		s                         SecuritySettings
		tls, sasl, plainInTheOpen bool
	}{
		{SecuritySettings{}, false, false, false},
		{SecuritySettings{TLS: true}, true, false, false},
		{SecuritySettings{Mechanism: "PLAIN", User: "u", Password: "p"}, false, true, true},
		{SecuritySettings{TLS: true, Mechanism: "plain", User: "u", Password: "p"}, true, true, false},
		{SecuritySettings{TLS: true, Mechanism: "scram-sha-512", User: "u", Password: "p"}, true, true, false},
	} {
		sec, err := NewSecurity(c.s)
		if err != nil {
			t.Fatalf("%+v: %v", c.s, err)
		}
		if (sec.TLS != nil) != c.tls || (sec.SASL != nil) != c.sasl || sec.Plaintext() != c.plainInTheOpen {
			t.Errorf("%+v: TLS %v, SASL %v, password in the clear %v; want %v, %v, %v", c.s, sec.TLS != nil, sec.SASL != nil, sec.Plaintext(), c.tls, c.sasl, c.plainInTheOpen)
		}
		if (sec.Dialer() == nil) != (!c.tls && !c.sasl) {
			t.Errorf("%+v: dialer %v", c.s, sec.Dialer())
		}
	}
}

// The brokers' CA rotated in place: CHAT_KAFKA_CA_FILE is written with
// the new CA beside the old, then the brokers' certificate is renewed by
// the new CA. The Security made at start reaches them again from a new
// connection, by its transports (producers, admin) and its dialer
// (readers, consumer groups), within the 10 s in which files are looked
// at again: no restart.
func TestARotatedCAOfTheBrokersIsTrustedWithoutARestart(t *testing.T) {
	r := testserver.NewCARotation(t)
	b, err := broker.Start(broker.Config{TLS: r.Server})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	sec, err := NewSecurity(SecuritySettings{CAFile: r.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	reach := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tr := sec.Transport()
		defer tr.CloseIdleConnections()
		if _, err := (&kafka.Client{Addr: kafka.TCP(b.Addr()), Transport: tr}).Metadata(ctx, &kafka.MetadataRequest{}); err != nil {
			return fmt.Errorf("transport: %w", err)
		}
		conn, err := sec.Dialer().DialContext(ctx, "tcp", b.Addr())
		if err != nil {
			return fmt.Errorf("dialer: %w", err)
		}
		conn.Close()
		return nil
	}
	if err := reach(); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	r.Bundle(t)
	r.Switch()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := reach()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the brokers' certificate renewed by the new CA, both CAs in %s for 20 s: %v; want them reached", r.CAFile, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
