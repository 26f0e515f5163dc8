// Package access holds the settings, shared by chatd and chatctl, that say
// how the stores are reached beyond their addresses and passwords: TLS,
// CA files, client certificates, Kafka's SASL login and Redis's ACL user.
// Settings is a value of strings and flags; its methods make the configs
// afresh on each call.
package access

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"unicode"

	"github.com/redis/go-redis/v9"

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

	// Log is told of a CA file or client certificate changed in place
	// that does not load (the one before is kept); nil: nowhere.
	Log *slog.Logger
}

// KafkaSecurity is how to reach the brokers, or which setting is wrong.
func (a Settings) KafkaSecurity() (topics.Security, error) {
	return topics.NewSecurity(topics.SecuritySettings{TLS: a.KafkaTLS, CAFile: a.KafkaCAFile,
		CertFile: a.KafkaCertFile, KeyFile: a.KafkaKeyFile,
		Mechanism: a.KafkaSASL, User: a.KafkaSASLUser, Password: a.KafkaSASLPass, Log: a.Log})
}

// RedisTLSClient is the TLS of the connections to Redis; nil: plaintext.
func (a Settings) RedisTLSClient() (*tlsclient.Client, error) {
	return (tlsclient.Files{On: a.RedisTLS, CAFile: a.RedisCAFile, CertFile: a.RedisCertFile, KeyFile: a.RedisKeyFile, Log: a.Log}).Client("CHAT_REDIS")
}

// RedisOptions are the options of a client of the Redis at addrs
// (several: a cluster) with the user, password and TLS of the settings.
// Over TLS, connections are made by the TLS client's Dial, which checks
// each against CHAT_REDIS_CA_FILE as it is then; TLSConfig is set too,
// but only tells go-redis that TLS is on (it dials with Dialer).
func (a Settings) RedisOptions(addrs []string, password string) (*redis.UniversalOptions, error) {
	tc, err := a.RedisTLSClient()
	if err != nil {
		return nil, err
	}
	o := &redis.UniversalOptions{Addrs: addrs, Username: a.RedisUser, Password: password}
	if tc != nil {
		o.TLSConfig = tc.Config()
		o.Dialer = tc.Dial(redis.NewDialer(&redis.Options{})) // go-redis's own, without TLS
	}
	return o, nil
}

// ClickHouseTLSClient is the TLS of the connections to ClickHouse; nil:
// plaintext.
func (a Settings) ClickHouseTLSClient() (*tlsclient.Client, error) {
	return (tlsclient.Files{On: a.ClickHouseTLS, CAFile: a.ClickHouseCAFile, CertFile: a.ClickHouseCertFile, KeyFile: a.ClickHouseKeyFile, Log: a.Log}).Client("CHAT_CLICKHOUSE")
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
