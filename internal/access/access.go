// Package access holds the settings, shared by chatd and chatctl, that say
// how the stores are reached beyond their addresses and passwords: TLS,
// CA files, client certificates, Kafka's SASL login and Redis's ACL user.
// Settings is a value of strings and flags; its methods make the configs
// afresh on each call.
package access

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode"

	"github.com/groupchat/chatd/internal/tlsclient"
	"github.com/groupchat/chatd/topics"
)

// Settings are the CHAT_KAFKA_TLS … CHAT_CLICKHOUSE_KEY_FILE variables.
type Settings struct {
	KafkaTLS           bool
	KafkaCAFile        string
	KafkaCertFile      string
	KafkaKeyFile       string
	KafkaSASL          string
	KafkaSASLUser      string
	KafkaSASLPass      string
	RedisUser          string
	RedisTLS           bool
	RedisCAFile        string
	RedisCertFile      string
	RedisKeyFile       string
	ClickHouseTLS      bool
	ClickHouseCAFile   string
	ClickHouseCertFile string
	ClickHouseKeyFile  string
}

// KafkaSecurity is how to reach the brokers, or which setting is wrong.
func (a Settings) KafkaSecurity() (topics.Security, error) {
	return topics.NewSecurity(topics.SecuritySettings{TLS: a.KafkaTLS, CAFile: a.KafkaCAFile,
		CertFile: a.KafkaCertFile, KeyFile: a.KafkaKeyFile,
		Mechanism: a.KafkaSASL, User: a.KafkaSASLUser, Password: a.KafkaSASLPass})
}

// RedisTLSConfig is the TLS config of the connections to Redis; nil:
// plaintext.
func (a Settings) RedisTLSConfig() (*tls.Config, error) {
	return (tlsclient.Files{On: a.RedisTLS, CAFile: a.RedisCAFile, CertFile: a.RedisCertFile, KeyFile: a.RedisKeyFile}).Config("CHAT_REDIS")
}

// ClickHouseTLSConfig is the TLS config of the connections to ClickHouse;
// nil: plaintext.
func (a Settings) ClickHouseTLSConfig() (*tls.Config, error) {
	return (tlsclient.Files{On: a.ClickHouseTLS, CAFile: a.ClickHouseCAFile, CertFile: a.ClickHouseCertFile, KeyFile: a.ClickHouseKeyFile}).Config("CHAT_CLICKHOUSE")
}

// Addrs splits s, a comma-separated list of store addresses (setting
// names it: CHAT_KAFKA_BROKERS, CHAT_REDIS_ADDRS, CHAT_CLICKHOUSE_ADDRS),
// and refuses an address that is no host:port, naming the setting and an
// example: a URL or a missing port would otherwise be dialled, and waited
// for, as a store that is down. A host alone takes defaultPort when it is
// not "" (Kafka's clients dial 9092 for a broker named without a port).
func Addrs(s, setting, defaultPort, example string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if i := strings.Index(a, "://"); i >= 0 {
			return nil, fmt.Errorf("%s: %q is a URL; give host:port without %q, e.g. %s", setting, a, a[:i+3], example)
		}
		if _, _, err := net.SplitHostPort(a); err != nil && defaultPort != "" && strings.HasSuffix(err.Error(), "missing port in address") {
			// An IPv6 host alone comes in brackets ("[::1]"), which
			// JoinHostPort puts back: unwrap that pair only, so that no
			// other bracket is dropped to leave a host of blanks (" 0"
			// of "] 0") that reads back as another.
			host := a
			if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
				host = host[1 : len(host)-1]
			}
			a = net.JoinHostPort(host, defaultPort)
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is no host:port (%v); give each address with its port, e.g. %s", setting, a, err, example)
		}
		if strings.IndexFunc(host, unicode.IsSpace) >= 0 {
			return nil, fmt.Errorf("%s: %q: the host %q holds a blank; e.g. %s", setting, a, host, example)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%s: %q: the port %q is no number from 1 to 65535; e.g. %s", setting, a, port, example)
		}
		out = append(out, a)
	}
	return out, nil
}
