package topics

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/groupchat/chatd/internal/tlsclient"
)

// Security is how chatd's connections to the brokers are made: over TLS,
// authenticated with SASL, both (a managed Kafka's SASL_SSL), or neither
// (the zero value: plaintext, as the embedded broker speaks). Every
// client, reader and consumer group of a deployment takes the same one.
type Security struct {
	TLS  *tlsclient.Client // nil: plaintext
	SASL sasl.Mechanism    // nil: no authentication
}

// SecuritySettings are the deployment's settings of Security, as chatd
// and chatctl read them (CHAT_KAFKA_TLS ...).
type SecuritySettings struct {
	TLS       bool   // CHAT_KAFKA_TLS
	CAFile    string // CHAT_KAFKA_CA_FILE; sets TLS
	CertFile  string // CHAT_KAFKA_CERT_FILE: a client certificate (mutual TLS); sets TLS
	KeyFile   string // CHAT_KAFKA_KEY_FILE: its key
	Mechanism string // CHAT_KAFKA_SASL: plain, scram-sha-256 or scram-sha-512; empty: none
	User      string // CHAT_KAFKA_SASL_USER
	Password  string // CHAT_KAFKA_SASL_PASSWORD

	Log *slog.Logger // told of a CA file or client certificate changed that does not load; nil: nowhere
}

// SASLMechanisms are the names CHAT_KAFKA_SASL takes.
var SASLMechanisms = []string{"plain", "scram-sha-256", "scram-sha-512"}

// NewSecurity makes the Security of s, or says which setting is wrong.
func NewSecurity(s SecuritySettings) (Security, error) {
	var sec Security
	var err error
	if sec.TLS, err = (tlsclient.Files{On: s.TLS, CAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile, Log: s.Log}).Client("CHAT_KAFKA"); err != nil {
		return Security{}, err
	}
	mech := strings.ToLower(s.Mechanism)
	if mech == "" {
		if s.User != "" || s.Password != "" {
			return Security{}, errors.New("CHAT_KAFKA_SASL_USER or CHAT_KAFKA_SASL_PASSWORD is set but no mechanism: set CHAT_KAFKA_SASL to " + strings.Join(SASLMechanisms, ", ") + " (what your brokers' listener takes), or unset them")
		}
		return sec, nil
	}
	// The name first: "scram" was told to add a user and a password, and
	// refused as no mechanism once they were set.
	if !slices.Contains(SASLMechanisms, mech) {
		return Security{}, fmt.Errorf("CHAT_KAFKA_SASL=%q is no mechanism chatd speaks; use one of %s", s.Mechanism, strings.Join(SASLMechanisms, ", "))
	}
	if s.User == "" || s.Password == "" {
		return Security{}, fmt.Errorf("CHAT_KAFKA_SASL=%s needs a user and a password: set CHAT_KAFKA_SASL_USER and CHAT_KAFKA_SASL_PASSWORD", s.Mechanism)
	}
	switch mech {
	case "plain":
		sec.SASL = plain.Mechanism{Username: s.User, Password: s.Password}
	case "scram-sha-256":
		sec.SASL, err = scram.Mechanism(scram.SHA256, s.User, s.Password)
	case "scram-sha-512":
		sec.SASL, err = scram.Mechanism(scram.SHA512, s.User, s.Password)
	default:
		return Security{}, fmt.Errorf("CHAT_KAFKA_SASL=%q is no mechanism chatd speaks; use one of %s", s.Mechanism, strings.Join(SASLMechanisms, ", "))
	}
	if err != nil {
		return Security{}, fmt.Errorf("CHAT_KAFKA_SASL=%s: %w; check CHAT_KAFKA_SASL_USER and CHAT_KAFKA_SASL_PASSWORD", s.Mechanism, err)
	}
	return sec, nil
}

// Plaintext reports whether a password would cross the network in the
// clear: SASL PLAIN without TLS.
func (s Security) Plaintext() bool {
	_, isPlain := s.SASL.(plain.Mechanism)
	return isPlain && s.TLS == nil
}

// Transport is a kafka-go transport with s, on connections of its own.
// Over TLS it dials through s.TLS, which checks each new connection
// against the CA file as it is then (kafka-go's own TLS would keep the
// CAs read at start).
func (s Security) Transport() *kafka.Transport {
	t := &kafka.Transport{SASL: s.SASL}
	if s.TLS != nil {
		// kafka-go's default dialer, with s.TLS.
		t.Dial = s.TLS.Dial((&net.Dialer{Timeout: 3 * time.Second}).DialContext)
	}
	return t
}

// Dialer is the dialer of readers and consumer groups with s, or nil for
// kafka-go's default dialer when s is plaintext without SASL.
func (s Security) Dialer() *kafka.Dialer {
	if s.TLS == nil && s.SASL == nil {
		return nil
	}
	// kafka.DefaultDialer's timeout and dual stack, with s.
	d := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, SASLMechanism: s.SASL}
	if s.TLS != nil {
		d.DialFunc = s.TLS.Dial((&net.Dialer{}).DialContext)
	}
	return d
}
