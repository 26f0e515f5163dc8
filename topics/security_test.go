package topics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
