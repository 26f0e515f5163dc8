package main

import (
	"io"
	"strings"
	"testing"
)

// A CHAT_* variable that does not parse is named in the error, with the
// value and the form wanted. It was swapped for a placeholder that
// validate refused with a message naming no variable ("message-retention,
// event-retention and shutdown-timeout must be durations"), so the
// newcomer who wrote CHAT_SHUTDOWN_TIMEOUT=10 or CHAT_EVENT_RETENTION=90d
// could not tell which of three to fix, nor why.
func TestAnUnparsableVariableIsNamedWithItsValue(t *testing.T) {
	for _, c := range []struct{ env, value, want string }{
		{"CHAT_SHUTDOWN_TIMEOUT", "10", "duration"},
		{"CHAT_EVENT_RETENTION", "90d", "duration"},
		{"CHAT_PARTITIONS", "sixteen", "whole number"},
		{"CHAT_MAX_BODY", "16k", "whole number"},
	} {
		getenv := func(k string) string {
			if k == c.env {
				return c.value
			}
			return ""
		}
		_, err := parseSettings("gateway", nil, getenv, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.env) || !strings.Contains(err.Error(), `"`+c.value+`"`) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: error %v, want one naming the variable, its value and the form wanted (%s)", c.env, c.value, err, c.want)
		}
	}
	// A flag wins over the variable: a valid flag beside a bad variable is used.
	s, err := parseSettings("gateway", []string{"-shutdown-timeout", "5s"}, func(k string) string {
		if k == "CHAT_SHUTDOWN_TIMEOUT" {
			return "10"
		}
		return ""
	}, io.Discard)
	if err != nil || s.ShutdownTimeout.String() != "5s" {
		t.Errorf("-shutdown-timeout 5s beside CHAT_SHUTDOWN_TIMEOUT=10: %v, %v; want 5s", s, err)
	}
}

// A store address that cannot be dialled as written (a URL, no port) is
// refused at once, naming the variable. It was dialled, and waited for
// as a store that is down for the whole start wait (60 s), ending in
// "too many colons in address" or "missing port in address".
func TestAStoreAddressThatIsNoHostPortIsRefusedAtOnce(t *testing.T) {
	for _, c := range []struct{ env, value, want string }{
		{"CHAT_REDIS_ADDRS", "redis://127.0.0.1:6379", `without "redis://"`},
		{"CHAT_CLICKHOUSE_ADDRS", "127.0.0.1", "missing port"},
		{"CHAT_KAFKA_BROKERS", "kafka://broker:9092", `without "kafka://"`},
		{"CHAT_KAFKA_BROKERS", "k1:9092,k2:", "no number from 1 to 65535"},
		{"CHAT_REDIS_ADDRS", "redis:http", "no number from 1 to 65535"},
	} {
		env := map[string]string{"CHAT_KAFKA_BROKERS": "kafka:9092", c.env: c.value}
		_, err := parseSettings("persister", nil, func(k string) string { return env[k] }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.env) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: error %v; want one naming the variable and saying %q", c.env, c.value, err, c.want)
		}
	}
	// A broker named without its port is Kafka's 9092, as its clients
	// dial it, and was taken before.
	env := map[string]string{"CHAT_KAFKA_BROKERS": "k1:9092, k2, [::1]", "CHAT_REDIS_ADDRS": "[::1]:6379", "CHAT_CLICKHOUSE_ADDRS": "clickhouse:9000"}
	if _, err := parseSettings("persister", nil, func(k string) string { return env[k] }, io.Discard); err != nil {
		t.Errorf("addresses of host:port, and brokers without their port: %v", err)
	}
}

// A CHAT_ALLOWED_ORIGINS entry that no browser's Origin can match was
// taken: "https://chat.example.com/" copied from the address bar, a path,
// or a ws:// scheme. Every page of that origin was then refused, and the
// refusal told the operator to add to CHAT_ALLOWED_ORIGINS the host they
// had added. chatd refuses such an entry at start, with the one meant.
func TestAnAllowedOriginNoBrowserSendsIsRefusedWithTheOneMeant(t *testing.T) {
	for _, c := range []struct{ value, want string }{
		{"https://chat.example.com/", `allowed-origins: "https://chat.example.com/" has a path ("/"), which a browser's Origin never has (CHAT_ALLOWED_ORIGINS): use "https://chat.example.com"`},
		{"chat.example.com/app", `use "chat.example.com"`},
		{"localhost:3000, http://localhost:5173/index.html", `use "http://localhost:5173"`},
		{"ws://chat.example.com", `not ws:// (CHAT_ALLOWED_ORIGINS): use https://chat.example.com, or the host alone (chat.example.com)`},
	} {
		_, err := parseSettings("gateway", nil, func(k string) string {
			return map[string]string{"CHAT_KAFKA_BROKERS": "kafka:9092", "CHAT_ALLOWED_ORIGINS": c.value}[k]
		}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CHAT_ALLOWED_ORIGINS=%s: error %v; want %q", c.value, err, c.want)
		}
	}
	for _, ok := range []string{"chat.example.com", "*.example.com", "https://chat.example.com", "http://localhost:3000", "*", "http*://x.example.com"} {
		if _, err := parseSettings("gateway", nil, func(k string) string {
			return map[string]string{"CHAT_KAFKA_BROKERS": "kafka:9092", "CHAT_ALLOWED_ORIGINS": ok}[k]
		}, io.Discard); err != nil {
			t.Errorf("CHAT_ALLOWED_ORIGINS=%s: %v; want it taken", ok, err)
		}
	}
}
