package main

import (
	"strings"
	"testing"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/internal/testserver"
)

// chatctl reaches a Kafka that takes TLS and SASL PLAIN only (a managed
// Kafka's SASL_SSL) and a Redis that takes TLS and an ACL user only, with
// the settings chatd reads: its admin client (topics, consumer groups),
// its producer (groups create) and its partition readers (tail).
func TestChatctlReachesKafkaAndRedisOverTLSWithALogin(t *testing.T) {
	f := testserver.NewTLS(t)
	b := testserver.NewBrokerTLS(t, f, broker.User{Mechanism: "PLAIN", Name: "ops", Password: "kafka-secret"})
	r := testserver.NewRedisTLS(t, f)
	r.AddUser(t, "ops", "redis-secret")
	e := &env{t: t, vars: map[string]string{
		"CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_PARTITIONS": "2",
		"CHAT_KAFKA_CA_FILE": f.CAFile, "CHAT_KAFKA_SASL": "plain", "CHAT_KAFKA_SASL_USER": "ops", "CHAT_KAFKA_SASL_PASSWORD": "kafka-secret",
		"CHAT_REDIS_ADDRS": r.TLSAddr, "CHAT_REDIS_CA_FILE": f.CAFile, "CHAT_REDIS_USER": "ops", "CHAT_REDIS_PASSWORD": "redis-secret",
	}}
	e.mustCtl("topics", "create")
	if out := e.mustCtl("topics", "verify"); !strings.Contains(out, "5 topics match the spec") {
		t.Errorf("topics verify over TLS: %q", out)
	}
	e.mustCtl("groups", "create", "team", "alice", "bob")
	if out := e.mustCtl("tail", "chat.members", "-n", "10"); !strings.Contains(out, `"alice"`) || !strings.Contains(out, `"bob"`) {
		t.Errorf("tail chat.members over TLS: %q, want alice's and bob's joins", out)
	}
	e.mustCtl("consumer-groups", "list")

	// Certificates no CA of the settings signed are named as such, with
	// the setting that trusts their CA.
	e.vars["CHAT_REDIS_CA_FILE"], e.vars["CHAT_REDIS_TLS"] = "", "true"
	if _, err := e.ctl("consumer-groups", "list"); err == nil || !strings.Contains(err.Error(), "set CHAT_REDIS_CA_FILE") {
		t.Errorf("Redis's certificate untrusted: %v, want an error naming CHAT_REDIS_CA_FILE", err)
	}
	e.vars["CHAT_KAFKA_CA_FILE"], e.vars["CHAT_KAFKA_TLS"] = "", "true"
	for _, args := range [][]string{{"topics", "verify"}, {"consumer-groups", "list"}} {
		if _, err := e.ctl(args...); err == nil || !strings.Contains(err.Error(), "set CHAT_KAFKA_CA_FILE") || strings.Contains(err.Error(), "is the broker up") {
			t.Errorf("chatctl %s with the brokers' certificate untrusted: %v, want an error naming CHAT_KAFKA_CA_FILE", strings.Join(args, " "), err)
		}
	}
	e.vars["CHAT_KAFKA_SASL_PASSWORD"] = ""
	if _, err := e.ctl("topics", "verify"); err == nil || !strings.Contains(err.Error(), "CHAT_KAFKA_SASL_PASSWORD") {
		t.Errorf("CHAT_KAFKA_SASL=plain without a password: %v, want an error naming CHAT_KAFKA_SASL_PASSWORD", err)
	}
}

// A Kafka and a Redis that take clients with a certificate their CA
// signed only (mutual TLS, as Aiven's Kafka by default) are reached with
// CHAT_*_CERT_FILE and CHAT_*_KEY_FILE; without them the server refuses
// the handshake, and a certificate without its key is refused at once.
func TestChatctlReachesKafkaAndRedisWithAClientCertificate(t *testing.T) {
	f := testserver.NewTLS(t)
	b := testserver.NewBrokerMutualTLS(t, f)
	r := testserver.NewRedisMutualTLS(t, f)
	e := &env{t: t, vars: map[string]string{
		"CHAT_KAFKA_BROKERS": b.Addr(), "CHAT_PARTITIONS": "2",
		"CHAT_KAFKA_CA_FILE": f.CAFile, "CHAT_KAFKA_CERT_FILE": f.ClientCertFile, "CHAT_KAFKA_KEY_FILE": f.ClientKeyFile,
		"CHAT_REDIS_ADDRS": r.TLSAddr, "CHAT_REDIS_CA_FILE": f.CAFile, "CHAT_REDIS_CERT_FILE": f.ClientCertFile, "CHAT_REDIS_KEY_FILE": f.ClientKeyFile,
	}}
	e.mustCtl("topics", "create")
	e.mustCtl("groups", "create", "team", "alice")
	if out := e.mustCtl("consumer-groups", "list"); !strings.Contains(out, "GROUP") {
		t.Errorf("consumer-groups list with client certificates: %q", out)
	}

	e.vars["CHAT_KAFKA_KEY_FILE"] = ""
	if _, err := e.ctl("topics", "verify"); err == nil || !strings.Contains(err.Error(), "CHAT_KAFKA_KEY_FILE") {
		t.Errorf("a client certificate without its key: %v, want an error naming CHAT_KAFKA_KEY_FILE", err)
	}
	e.vars["CHAT_KAFKA_CERT_FILE"] = ""
	if _, err := e.ctl("topics", "verify"); err == nil || !strings.Contains(err.Error(), "set CHAT_KAFKA_CERT_FILE and CHAT_KAFKA_KEY_FILE") {
		t.Errorf("no client certificate for a broker that requires one: %v, want an error naming CHAT_KAFKA_CERT_FILE and CHAT_KAFKA_KEY_FILE", err)
	}
}
