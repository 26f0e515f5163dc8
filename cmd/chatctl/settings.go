package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/gateway"
	"github.com/groupchat/chatd/internal/access"
	"github.com/groupchat/chatd/internal/flags"
	"github.com/groupchat/chatd/internal/tlsclient"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// settings are the connection settings every command shares. Each has a
// flag and the CHAT_* variable chatd reads for the same thing; a flag wins
// over the variable, the variable over the default.
type settings struct {
	access.Settings  // TLS and logins of the stores, as chatctl has them
	KafkaBrokers     string
	Partitions       int
	Replicas         int // CHAT_REPLICATION_FACTOR
	MessageRetention time.Duration
	RedisAddrs       string
	RedisPassword    string
	ClickHouseAddrs  string
	ClickHouseDB     string
	ClickHouseUser   string
	ClickHousePass   string
	MaxGroups        int // CHAT_MAX_GROUPS_PER_USER

	kafkaSecurity topics.Security // of the Kafka* settings, made by validate
}

// setting describes one knob, for flags, env and `chatctl help`.
type setting struct {
	flag, env, def, usage string
	bind                  func(s *settings, fs *flag.FlagSet, name, def, usage string)
}

var allSettings = []setting{
	{"kafka-brokers", "CHAT_KAFKA_BROKERS", "127.0.0.1:9092", "Kafka bootstrap brokers, host:port,...", strVar(func(s *settings) *string { return &s.KafkaBrokers })},
	{"kafka-tls", "CHAT_KAFKA_TLS", "false", "connect to the brokers over TLS, trusting the system's CAs or CHAT_KAFKA_CA_FILE's", boolVar(func(s *settings) *bool { return &s.KafkaTLS })},
	{"kafka-ca-file", "CHAT_KAFKA_CA_FILE", "", "PEM file of the CAs that sign the brokers' certificates, trusted instead of the system's; sets kafka-tls", strVar(func(s *settings) *string { return &s.KafkaCAFile })},
	{"kafka-cert-file", "CHAT_KAFKA_CERT_FILE", "", "client certificate (PEM) for the brokers when it asks for one (mutual TLS); sets kafka-tls", strVar(func(s *settings) *string { return &s.KafkaCertFile })},
	{"kafka-key-file", "CHAT_KAFKA_KEY_FILE", "", "the private key (PEM) of CHAT_KAFKA_CERT_FILE", strVar(func(s *settings) *string { return &s.KafkaKeyFile })},
	{"kafka-sasl", "CHAT_KAFKA_SASL", "", "SASL mechanism to authenticate to the brokers with: plain, scram-sha-256 or scram-sha-512; empty: none", strVar(func(s *settings) *string { return &s.KafkaSASL })},
	{"kafka-sasl-user", "CHAT_KAFKA_SASL_USER", "", "SASL user name", strVar(func(s *settings) *string { return &s.KafkaSASLUser })},
	{"kafka-sasl-password", "CHAT_KAFKA_SASL_PASSWORD", "", "SASL password", strVar(func(s *settings) *string { return &s.KafkaSASLPass })},
	{"partitions", "CHAT_PARTITIONS", "16", "partitions of every chat.* topic (topics create / verify)", intVar(func(s *settings) *int { return &s.Partitions })},
	{"replication-factor", "CHAT_REPLICATION_FACTOR", "0", "replicas of each chat.* topic, with min.insync.replicas one fewer (topics create / verify); 0: the broker's default, right for a single broker only: set 3 on a cluster of three brokers or more", intVar(func(s *settings) *int { return &s.Replicas })},
	{"message-retention", "CHAT_MESSAGE_RETENTION", "168h", "chat.messages retention (topics create / verify); negative (e.g. -1h) keeps everything, as chatd does without ClickHouse", durVar(func(s *settings) *time.Duration { return &s.MessageRetention })},
	{"redis-addrs", "CHAT_REDIS_ADDRS", "", "Redis address, or several for a Redis Cluster", strVar(func(s *settings) *string { return &s.RedisAddrs })},
	{"redis-password", "CHAT_REDIS_PASSWORD", "", "Redis password", strVar(func(s *settings) *string { return &s.RedisPassword })},
	{"redis-user", "CHAT_REDIS_USER", "", "Redis ACL user (Redis 6 and later); empty: the default user", strVar(func(s *settings) *string { return &s.RedisUser })},
	{"redis-tls", "CHAT_REDIS_TLS", "false", "connect to Redis over TLS, trusting the system's CAs or CHAT_REDIS_CA_FILE's", boolVar(func(s *settings) *bool { return &s.RedisTLS })},
	{"redis-ca-file", "CHAT_REDIS_CA_FILE", "", "PEM file of the CAs that sign Redis's certificate, trusted instead of the system's; sets redis-tls", strVar(func(s *settings) *string { return &s.RedisCAFile })},
	{"redis-cert-file", "CHAT_REDIS_CERT_FILE", "", "client certificate (PEM) for Redis when it asks for one (mutual TLS); sets redis-tls", strVar(func(s *settings) *string { return &s.RedisCertFile })},
	{"redis-key-file", "CHAT_REDIS_KEY_FILE", "", "the private key (PEM) of CHAT_REDIS_CERT_FILE", strVar(func(s *settings) *string { return &s.RedisKeyFile })},
	{"max-groups-per-user", "CHAT_MAX_GROUPS_PER_USER", "5000", "groups a user may be a member of at once, as the gateways have it (members add / groups create refuse an add past it)", intVar(func(s *settings) *int { return &s.MaxGroups })},
	{"clickhouse-addrs", "CHAT_CLICKHOUSE_ADDRS", "", "ClickHouse native address(es), host:9000,...", strVar(func(s *settings) *string { return &s.ClickHouseAddrs })},
	{"clickhouse-database", "CHAT_CLICKHOUSE_DATABASE", "chat", "ClickHouse database", strVar(func(s *settings) *string { return &s.ClickHouseDB })},
	{"clickhouse-user", "CHAT_CLICKHOUSE_USER", "default", "ClickHouse user", strVar(func(s *settings) *string { return &s.ClickHouseUser })},
	{"clickhouse-password", "CHAT_CLICKHOUSE_PASSWORD", "", "ClickHouse password", strVar(func(s *settings) *string { return &s.ClickHousePass })},
	{"clickhouse-tls", "CHAT_CLICKHOUSE_TLS", "false", "connect to ClickHouse over TLS (its secure native port, 9440), trusting the system's CAs or CHAT_CLICKHOUSE_CA_FILE's", boolVar(func(s *settings) *bool { return &s.ClickHouseTLS })},
	{"clickhouse-ca-file", "CHAT_CLICKHOUSE_CA_FILE", "", "PEM file of the CAs that sign ClickHouse's certificate, trusted instead of the system's; sets clickhouse-tls", strVar(func(s *settings) *string { return &s.ClickHouseCAFile })},
	{"clickhouse-cert-file", "CHAT_CLICKHOUSE_CERT_FILE", "", "client certificate (PEM) for ClickHouse when it asks for one (mutual TLS); sets clickhouse-tls", strVar(func(s *settings) *string { return &s.ClickHouseCertFile })},
	{"clickhouse-key-file", "CHAT_CLICKHOUSE_KEY_FILE", "", "the private key (PEM) of CHAT_CLICKHOUSE_CERT_FILE", strVar(func(s *settings) *string { return &s.ClickHouseKeyFile })},
}

// envs are the CHAT_* variables of allSettings.
func envs() []flags.Env {
	out := make([]flags.Env, len(allSettings))
	for i, st := range allSettings {
		out[i] = flags.Env{Name: st.env, Flag: st.flag, Usage: st.usage}
	}
	return out
}

// envOf returns the CHAT_* variable of the setting named flag.
func envOf(flag string) string {
	for _, st := range allSettings {
		if st.flag == flag {
			return st.env
		}
	}
	return ""
}

func strVar(f func(*settings) *string) func(*settings, *flag.FlagSet, string, string, string) {
	return func(s *settings, fs *flag.FlagSet, n, d, u string) { fs.StringVar(f(s), n, d, u) }
}

func intVar(f func(*settings) *int) func(*settings, *flag.FlagSet, string, string, string) {
	return func(s *settings, fs *flag.FlagSet, n, d, u string) {
		v, err := strconv.Atoi(d)
		if err != nil {
			v = -2 // reported by validate
		}
		fs.IntVar(f(s), n, v, u)
	}
}

func boolVar(f func(*settings) *bool) func(*settings, *flag.FlagSet, string, string, string) {
	return func(s *settings, fs *flag.FlagSet, n, d, u string) {
		v, _ := strconv.ParseBool(d) // one that does not parse is reported by flags.CheckEnv
		fs.BoolVar(f(s), n, v, u)
	}
}

func durVar(f func(*settings) *time.Duration) func(*settings, *flag.FlagSet, string, string, string) {
	return func(s *settings, fs *flag.FlagSet, n, d, u string) {
		v, err := time.ParseDuration(d)
		if err != nil {
			v = 0 // reported by validate
		}
		fs.DurationVar(f(s), n, v, u)
	}
}

// command is one parsed invocation: its flags (the shared settings plus
// the command's own) and its arguments.
type command struct {
	name   string
	s      *settings
	fs     *flag.FlagSet
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer

	// joinHold is how long a join reserved is taken as being written, and
	// its place as taken, before the member projector has it: the
	// gateway's default.
	joinHold time.Duration
}

func newCommand(name string, getenv func(string) string, stdout, stderr io.Writer) *command {
	c := &command{name: name, s: &settings{}, fs: flag.NewFlagSet("chatctl "+name, flag.ContinueOnError),
		getenv: getenv, stdout: stdout, stderr: stderr, joinHold: gateway.DefaultJoinHold}
	c.fs.SetOutput(stderr)
	for _, st := range allSettings {
		def := st.def
		if v := getenv(st.env); v != "" {
			def = v
		}
		st.bind(c.s, c.fs, st.flag, def, st.usage+" ("+st.env+")")
	}
	return c
}

// parse reads flags, which may come before and between the arguments, and
// returns the arguments. "--" ends the flags: every argument after it is
// an argument, one that begins with "-" too (a uid may).
func (c *command) parse(args []string) ([]string, error) {
	var rest []string
	for {
		if err := flags.Parse(c.fs, args); err != nil {
			return nil, err
		}
		taken := len(args) - len(c.fs.Args())
		if endsFlags(c.fs, args, taken) {
			rest = append(rest, c.fs.Args()...)
			break
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		rest = append(rest, args[0])
		args = args[1:]
	}
	// Once every flag is read: one given after an argument wins too.
	if err := flags.CheckEnv(c.fs, c.getenv, envs()); err != nil {
		return nil, err
	}
	return rest, c.s.validate()
}

// endsFlags reports whether the last of the n args that fs.Parse took is
// the "--" that ends the flags, not the value of a flag ("-from --").
func endsFlags(fs *flag.FlagSet, args []string, n int) bool {
	for i := 0; i < n; i++ {
		if args[i] == "--" {
			return i == n-1
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if f := fs.Lookup(name); f != nil && !hasValue {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				i++ // the next argument is its value
			}
		}
	}
	return false
}

func (s *settings) validate() error {
	if s.Partitions < 1 || s.Partitions > 10000 {
		return errors.New("partitions must be a whole number 1..10000 (CHAT_PARTITIONS / -partitions)")
	}
	if err := topics.CheckReplicationFactor(s.Replicas); err != nil {
		return err
	}
	var err error
	s.kafkaSecurity, err = s.KafkaSecurity()
	return err
}

func (s *settings) brokers() ([]string, error) {
	b, err := access.Addrs(s.KafkaBrokers, "CHAT_KAFKA_BROKERS (-kafka-brokers)", "9092", "kafka-1:9092,kafka-2:9092")
	if err != nil {
		return nil, err
	}
	if len(b) == 0 {
		return nil, errors.New("no Kafka brokers: set CHAT_KAFKA_BROKERS or -kafka-brokers (host:port,...)")
	}
	return b, nil
}

func (s *settings) topicsConfig() (topics.Config, error) {
	b, err := s.brokers()
	if err != nil {
		return topics.Config{}, err
	}
	retention := s.MessageRetention
	if retention == 0 {
		return topics.Config{}, errors.New("message-retention must be a duration such as 168h, or a negative one such as -1h to keep everything (CHAT_MESSAGE_RETENTION)")
	}
	return topics.Config{Brokers: b, Security: s.kafkaSecurity, Partitions: s.Partitions, ReplicationFactor: s.Replicas, MessageRetention: retention}, nil
}

// redis connects to Redis and checks that it answers.
func (s *settings) redis(ctx context.Context) (*store.Redis, func(), error) {
	addrs, err := access.Addrs(s.RedisAddrs, "CHAT_REDIS_ADDRS (-redis-addrs)", "", "redis:6379")
	if err != nil {
		return nil, nil, err
	}
	if len(addrs) == 0 {
		return nil, nil, errors.New("this command needs Redis: set CHAT_REDIS_ADDRS or -redis-addrs (host:port, or several for a cluster; " +
			"against chatd dev, its log names its embedded Redis: \"embedded Redis ... addr=\")")
	}
	o, err := s.RedisOptions(addrs, s.RedisPassword)
	if err != nil {
		return nil, nil, err
	}
	rc := redis.NewUniversalClient(o)
	r, err := store.NewRedis(rc, store.RedisConfig{})
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = r.Ping(pctx)
		cancel()
	}
	if err != nil {
		rc.Close()
		return nil, nil, fmt.Errorf("Redis at %s: %w%s; check CHAT_REDIS_ADDRS", s.RedisAddrs, err, tlsclient.Advice(err, "CHAT_REDIS_TLS", "CHAT_REDIS_CA_FILE", "Redis's"))
	}
	return r, func() { rc.Close() }, nil
}

// clickhouse connects to ClickHouse and applies the migrations.
func (s *settings) clickhouse(ctx context.Context) (*store.ClickHouse, error) {
	addrs, err := access.Addrs(s.ClickHouseAddrs, "CHAT_CLICKHOUSE_ADDRS (-clickhouse-addrs)", "", "clickhouse:9000 (the native protocol's port, not the HTTP port 8123)")
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, errors.New("this command needs ClickHouse: set CHAT_CLICKHOUSE_ADDRS or -clickhouse-addrs (host:9000,...)")
	}
	tc, err := s.ClickHouseTLSClient()
	if err != nil {
		return nil, err
	}
	ch, err := store.OpenClickHouse(ctx, store.ClickHouseConfig{Addrs: addrs, Database: s.ClickHouseDB,
		Username: s.ClickHouseUser, Password: s.ClickHousePass, QueryTimeout: 5 * time.Minute, TLS: tc})
	if err != nil {
		return nil, fmt.Errorf("ClickHouse at %s: %w%s; check CHAT_CLICKHOUSE_ADDRS (the native protocol's port, 9000 by default, not the HTTP port 8123)", s.ClickHouseAddrs, err, tlsclient.Advice(err, "CHAT_CLICKHOUSE_TLS", "CHAT_CLICKHOUSE_CA_FILE", "ClickHouse's"))
	}
	return ch, nil
}

func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
