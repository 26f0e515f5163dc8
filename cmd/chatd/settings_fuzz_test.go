package main

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/groupchat/chatd/topics"
)

// FuzzSettingEnv sets one CHAT_* variable to any value. chatd either
// refuses with an error that names the variable, or takes the value as
// the variable's flag takes it, every other setting at its default.
func FuzzSettingEnv(f *testing.F) {
	index := func(env string) uint8 {
		for i, st := range allSettings {
			if st.env == env {
				return uint8(i)
			}
		}
		f.Fatalf("no setting reads %s", env)
		return 0
	}
	for _, c := range []struct {
		env, value string
		dev        bool
	}{
		{"CHAT_PARTITIONS", "32", false},
		{"CHAT_PARTITIONS", "0", false},
		{"CHAT_PARTITIONS", "0x10", false},
		{"CHAT_PARTITIONS", "sixteen", false},
		{"CHAT_REPLICATION_FACTOR", "3", false},
		{"CHAT_REPLICATION_FACTOR", "3", true},
		{"CHAT_REPLICATION_FACTOR", "-1", false},
		{"CHAT_WINDOW_SIZE", "-1", false},
		{"CHAT_WINDOW_SIZE", "0", false},
		{"CHAT_MAX_BODY", "16k", false},
		{"CHAT_MAX_BODY", "99999999999999999999", false},
		{"CHAT_MESSAGE_RETENTION", "30m", false},
		{"CHAT_EVENT_RETENTION", "90d", false},
		{"CHAT_EVENT_RETENTION", "0", false},
		{"CHAT_SHUTDOWN_TIMEOUT", "10", false},
		{"CHAT_SHUTDOWN_TIMEOUT", "500ms", false},
		{"CHAT_HTTP_READ_TIMEOUT", "0s", false},
		{"CHAT_MAX_TOKEN_TTL", "59s", false},
		{"CHAT_MAX_AUTHENTICATING", " 10", false},
		{"CHAT_LOG_LEVEL", "debug", false},
		{"CHAT_LOG_LEVEL", "verbose", false},
		{"CHAT_LOG_FORMAT", "yaml", false},
		{"CHAT_KAFKA_BROKERS", "kafka:9092", true},
		{"CHAT_KAFKA_BROKERS", "kafka:9092", false},
		{"CHAT_KAFKA_BROKERS", "kafka://kafka:9092", false},
		{"CHAT_REDIS_ADDRS", "redis:6379,[::1]:6380", false},
		{"CHAT_CLICKHOUSE_ADDRS", "127.0.0.1", false},
		{"CHAT_JWT_SECRET", "\x00", false},
		{"CHAT_KAFKA_TLS", "1", false},
		{"CHAT_KAFKA_TLS", "yes", false},
		{"CHAT_KAFKA_SASL", "gssapi", false},
		{"CHAT_KAFKA_SASL_USER", "0", false},
		{"CHAT_KAFKA_CA_FILE", "/nonexistent/ca.pem", false},
		{"CHAT_KAFKA_CERT_FILE", "client.pem", false},
		{"CHAT_REDIS_TLS", "true", false},
		{"CHAT_TLS_CERT_FILE", "cert.pem", false},
	} {
		f.Add(index(c.env), c.value, c.dev)
	}
	f.Fuzz(func(t *testing.T, i uint8, value string, dev bool) {
		st := allSettings[int(i)%len(allSettings)]
		role := "gateway"
		if dev {
			role = "dev"
		}
		s, err := parseSettings(role, nil, func(k string) string {
			if k == st.env {
				return value
			}
			return ""
		}, io.Discard)
		if err != nil {
			if !strings.Contains(err.Error(), st.env) {
				t.Fatalf("%s=%q (%s): %q names not the variable", st.env, value, role, err)
			}
			return
		}
		want := &settings{}
		fs := flag.NewFlagSet("", flag.ContinueOnError)
		for _, o := range allSettings {
			o.bind(want, fs, o.flag, o.def, "")
		}
		if value != "" {
			if err := fs.Set(st.flag, value); err != nil {
				t.Fatalf("%s=%q taken, which -%s refuses: %v", st.env, value, st.flag, err)
			}
		}
		s.kafkaSecurity = topics.Security{} // made from the settings compared
		if !reflect.DeepEqual(s, want) {
			t.Fatalf("%s=%q gave %+v, want %+v", st.env, value, s, want)
		}
	})
}
