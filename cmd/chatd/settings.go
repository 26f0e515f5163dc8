package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/internal/access"
	"github.com/groupchat/chatd/internal/flags"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/schema"
	"github.com/groupchat/chatd/topics"
)

// settings are every knob of chatd. Each has a flag and a CHAT_* variable;
// a flag wins over the variable, the variable over the default.
type settings struct {
	access.Settings  // TLS and logins of the stores, as chatctl has them
	HTTPAddr         string
	TLSCertFile      string
	TLSKeyFile       string
	HTTPReadTimeout  time.Duration
	HTTPIdleTimeout  time.Duration
	HTTPWriteTimeout time.Duration
	DataDir          string
	KafkaListen      string
	KafkaBrokers     string
	Partitions       int
	Replicas         int // CHAT_REPLICATION_FACTOR
	RedisAddrs       string
	RedisPassword    string
	WindowSize       int
	ClickHouseAddrs  string
	ClickHouseDB     string
	ClickHouseUser   string
	ClickHousePass   string
	ClickHouseConns  int
	Retention        time.Duration
	EventRetention   time.Duration
	ShutdownTimeout  time.Duration
	LogLevel         string
	LogFormat        string
	JWTSecret        string
	AdminToken       string
	NodeID           string
	AllowedOrigins   string
	MaxBody          int
	MaxTokenTTL      time.Duration
	MaxAuthing       int
	MaxCatchingUp    int
	MaxGroups        int
	DebugAddr        string
	MetricsAddr      string

	kafkaSecurity topics.Security // of the Kafka* settings, made by validate
}

// setting describes one knob, for flags, env and `chatd help`.
type setting struct {
	flag, env, def, usage string
	roles                 string // "dev", "prod" or "all"
	bind                  func(s *settings, fs *flag.FlagSet, name, def, usage string)
}

func str(f func(*settings) *string) func(*settings, *flag.FlagSet, string, string, string) {
	return func(s *settings, fs *flag.FlagSet, n, d, u string) { fs.StringVar(f(s), n, d, u) }
}

func num(f func(*settings) *int) func(*settings, *flag.FlagSet, string, string, string) {
	return func(s *settings, fs *flag.FlagSet, n, d, u string) {
		v, err := strconv.Atoi(d)
		if err != nil {
			v = -2 // reported by validate
		}
		fs.IntVar(f(s), n, v, u)
	}
}

func boolean(f func(*settings) *bool) func(*settings, *flag.FlagSet, string, string, string) {
	return func(s *settings, fs *flag.FlagSet, n, d, u string) {
		v, _ := strconv.ParseBool(d) // one that does not parse is reported by checkEnv
		fs.BoolVar(f(s), n, v, u)
	}
}

func dur(f func(*settings) *time.Duration) func(*settings, *flag.FlagSet, string, string, string) {
	return func(s *settings, fs *flag.FlagSet, n, d, u string) {
		v, err := time.ParseDuration(d)
		if err != nil {
			v = -2 // reported by validate
		}
		fs.DurationVar(f(s), n, v, u)
	}
}

var allSettings = []setting{
	{"http-addr", "CHAT_HTTP_ADDR", "127.0.0.1:8080", "HTTP listen address (health, API)", "all", str(func(s *settings) *string { return &s.HTTPAddr })},
	{"tls-cert-file", "CHAT_TLS_CERT_FILE", "", "a gateway (and dev) serves HTTPS and wss:// on the HTTP address with this certificate chain (PEM), reloaded when the files change; the other roles keep plain HTTP for probes and scrapes; empty: plain HTTP (terminate TLS in front)", "all", str(func(s *settings) *string { return &s.TLSCertFile })},
	{"tls-key-file", "CHAT_TLS_KEY_FILE", "", "the private key (PEM) of CHAT_TLS_CERT_FILE", "all", str(func(s *settings) *string { return &s.TLSKeyFile })},
	{"http-read-timeout", "CHAT_HTTP_READ_TIMEOUT", "30s", "time a client has to send a whole HTTP request, its body too (WebSockets are not cut by it)", "all", dur(func(s *settings) *time.Duration { return &s.HTTPReadTimeout })},
	{"http-write-timeout", "CHAT_HTTP_WRITE_TIMEOUT", "10s", "time a client has to take in an HTTP answer once it is ready (the page, health checks, /metrics, the API), or a WebSocket what is queued for it; one that reads nothing is then dropped", "all", dur(func(s *settings) *time.Duration { return &s.HTTPWriteTimeout })},
	{"http-idle-timeout", "CHAT_HTTP_IDLE_TIMEOUT", "120s", "a keep-alive HTTP connection idle this long is closed; keep it above your load balancer's idle timeout", "all", dur(func(s *settings) *time.Duration { return &s.HTTPIdleTimeout })},
	{"data-dir", "CHAT_DATA_DIR", "./data", "where the embedded broker keeps its log", "dev", str(func(s *settings) *string { return &s.DataDir })},
	{"kafka-listen", "CHAT_KAFKA_LISTEN", "127.0.0.1:9092", "the embedded broker's Kafka listener (kcat and other tools attach here)", "dev", str(func(s *settings) *string { return &s.KafkaListen })},
	{"kafka-brokers", "CHAT_KAFKA_BROKERS", "", "Kafka bootstrap brokers, host:port,...", "prod", str(func(s *settings) *string { return &s.KafkaBrokers })},
	{"kafka-tls", "CHAT_KAFKA_TLS", "false", "connect to the brokers over TLS, trusting the system's CAs or CHAT_KAFKA_CA_FILE's (a managed Kafka's SSL or SASL_SSL listener)", "prod", boolean(func(s *settings) *bool { return &s.KafkaTLS })},
	{"kafka-ca-file", "CHAT_KAFKA_CA_FILE", "", "PEM file of the CAs that sign the brokers' certificates, trusted instead of the system's; sets kafka-tls", "prod", str(func(s *settings) *string { return &s.KafkaCAFile })},
	{"kafka-cert-file", "CHAT_KAFKA_CERT_FILE", "", "client certificate (PEM) for the brokers when it asks for one (mutual TLS); sets kafka-tls", "prod", str(func(s *settings) *string { return &s.KafkaCertFile })},
	{"kafka-key-file", "CHAT_KAFKA_KEY_FILE", "", "the private key (PEM) of CHAT_KAFKA_CERT_FILE", "prod", str(func(s *settings) *string { return &s.KafkaKeyFile })},
	{"kafka-sasl", "CHAT_KAFKA_SASL", "", "SASL mechanism to authenticate to the brokers with: plain, scram-sha-256 or scram-sha-512; empty: none", "prod", str(func(s *settings) *string { return &s.KafkaSASL })},
	{"kafka-sasl-user", "CHAT_KAFKA_SASL_USER", "", "SASL user name", "prod", str(func(s *settings) *string { return &s.KafkaSASLUser })},
	{"kafka-sasl-password", "CHAT_KAFKA_SASL_PASSWORD", "", "SASL password", "prod", str(func(s *settings) *string { return &s.KafkaSASLPass })},
	{"partitions", "CHAT_PARTITIONS", "16", "partitions of every chat.* topic; fixed once the topics exist", "all", num(func(s *settings) *int { return &s.Partitions })},
	{"replication-factor", "CHAT_REPLICATION_FACTOR", "0", "replicas of each chat.* topic created, with min.insync.replicas one fewer; 0: the broker's default (1 on a stock Kafka), right for a single broker only: set 3 on a cluster of three brokers or more. Existing topics with fewer are warned of at start", "prod", num(func(s *settings) *int { return &s.Replicas })},
	{"redis-addrs", "CHAT_REDIS_ADDRS", "", "Redis address, or several for a Redis Cluster (dev: empty = embedded)", "all", str(func(s *settings) *string { return &s.RedisAddrs })},
	{"redis-password", "CHAT_REDIS_PASSWORD", "", "Redis password", "all", str(func(s *settings) *string { return &s.RedisPassword })},
	{"redis-user", "CHAT_REDIS_USER", "", "Redis ACL user (Redis 6 and later); empty: the default user", "all", str(func(s *settings) *string { return &s.RedisUser })},
	{"redis-tls", "CHAT_REDIS_TLS", "false", "connect to Redis over TLS, trusting the system's CAs or CHAT_REDIS_CA_FILE's", "all", boolean(func(s *settings) *bool { return &s.RedisTLS })},
	{"redis-ca-file", "CHAT_REDIS_CA_FILE", "", "PEM file of the CAs that sign Redis's certificate, trusted instead of the system's; sets redis-tls", "all", str(func(s *settings) *string { return &s.RedisCAFile })},
	{"redis-cert-file", "CHAT_REDIS_CERT_FILE", "", "client certificate (PEM) for Redis when it asks for one (mutual TLS); sets redis-tls", "all", str(func(s *settings) *string { return &s.RedisCertFile })},
	{"redis-key-file", "CHAT_REDIS_KEY_FILE", "", "the private key (PEM) of CHAT_REDIS_CERT_FILE", "all", str(func(s *settings) *string { return &s.RedisKeyFile })},
	{"window-size", "CHAT_WINDOW_SIZE", "1000", "messages kept per group in the Redis window (-1: all; the default without ClickHouse)", "all", num(func(s *settings) *int { return &s.WindowSize })},
	{"clickhouse-addrs", "CHAT_CLICKHOUSE_ADDRS", "", "ClickHouse native address(es), host:9000,...; empty = no ClickHouse", "all", str(func(s *settings) *string { return &s.ClickHouseAddrs })},
	{"clickhouse-database", "CHAT_CLICKHOUSE_DATABASE", "chat", "ClickHouse database (created if missing)", "all", str(func(s *settings) *string { return &s.ClickHouseDB })},
	{"clickhouse-user", "CHAT_CLICKHOUSE_USER", "default", "ClickHouse user", "all", str(func(s *settings) *string { return &s.ClickHouseUser })},
	{"clickhouse-password", "CHAT_CLICKHOUSE_PASSWORD", "", "ClickHouse password", "all", str(func(s *settings) *string { return &s.ClickHousePass })},
	{"clickhouse-tls", "CHAT_CLICKHOUSE_TLS", "false", "connect to ClickHouse over TLS (its secure native port, 9440), trusting the system's CAs or CHAT_CLICKHOUSE_CA_FILE's", "all", boolean(func(s *settings) *bool { return &s.ClickHouseTLS })},
	{"clickhouse-ca-file", "CHAT_CLICKHOUSE_CA_FILE", "", "PEM file of the CAs that sign ClickHouse's certificate, trusted instead of the system's; sets clickhouse-tls", "all", str(func(s *settings) *string { return &s.ClickHouseCAFile })},
	{"clickhouse-cert-file", "CHAT_CLICKHOUSE_CERT_FILE", "", "client certificate (PEM) for ClickHouse when it asks for one (mutual TLS); sets clickhouse-tls", "all", str(func(s *settings) *string { return &s.ClickHouseCertFile })},
	{"clickhouse-key-file", "CHAT_CLICKHOUSE_KEY_FILE", "", "the private key (PEM) of CHAT_CLICKHOUSE_CERT_FILE", "all", str(func(s *settings) *string { return &s.ClickHouseKeyFile })},
	{"clickhouse-conns", "CHAT_CLICKHOUSE_CONNS", "10", "connections to ClickHouse per process; pages of old messages read through all but two of them (one at least), and a user's through two at most at once", "all", num(func(s *settings) *int { return &s.ClickHouseConns })},
	{"message-retention", "CHAT_MESSAGE_RETENTION", "168h", "chat.messages retention when ClickHouse keeps the history (without it: forever); negative (e.g. -1h): forever", "all", dur(func(s *settings) *time.Duration { return &s.Retention })},
	{"event-retention", "CHAT_EVENT_RETENTION", "2160h", "ack and receipt event logs in ClickHouse older than this are dropped, by whole months (0: keep)", "all", dur(func(s *settings) *time.Duration { return &s.EventRetention })},
	{"shutdown-timeout", "CHAT_SHUTDOWN_TIMEOUT", "10s", "how long shutdown may drain", "all", dur(func(s *settings) *time.Duration { return &s.ShutdownTimeout })},
	{"jwt-secret", "CHAT_JWT_SECRET", "", "secret that signs client tokens (HS256), >= 32 bytes (dev: generated and kept in the data dir)", "all", str(func(s *settings) *string { return &s.JWTSecret })},
	{"admin-token", "CHAT_ADMIN_TOKEN", "", "bearer token for /v1/admin/* (empty: administration off; dev: generated and logged)", "all", str(func(s *settings) *string { return &s.AdminToken })},
	{"node-id", "CHAT_NODE_ID", "", "this gateway's name in presence and its push channel; empty: hostname-pid", "all", str(func(s *settings) *string { return &s.NodeID })},
	{"allowed-origins", "CHAT_ALLOWED_ORIGINS", "", "browser origins (host patterns) allowed besides the gateway's own host, comma-separated", "all", str(func(s *settings) *string { return &s.AllowedOrigins })},
	{"debug-addr", "CHAT_DEBUG_ADDR", "", "listen address of the Go profiler (/debug/pprof/); empty: off. Keep it private", "all", str(func(s *settings) *string { return &s.DebugAddr })},
	{"metrics-addr", "CHAT_METRICS_ADDR", "", "listen address of /metrics apart from the HTTP address, which then serves none; empty: /metrics on the HTTP address", "all", str(func(s *settings) *string { return &s.MetricsAddr })},
	{"max-token-ttl", "CHAT_MAX_TOKEN_TTL", "720h", "longest life a client token may have left: a token whose exp is further away is refused (bad_token); issue tokens within it", "all", dur(func(s *settings) *time.Duration { return &s.MaxTokenTTL })},
	{"max-authenticating", "CHAT_MAX_AUTHENTICATING", "10000", "WebSockets a gateway holds before they authenticate; past it an upgrade is refused with 503 overloaded", "all", num(func(s *settings) *int { return &s.MaxAuthing })},
	{"max-catching-up", "CHAT_MAX_CATCHING_UP", "64", "connection setups, syncs and pulls a gateway works on at once, apart from its sends; past it they wait up to 1 s, then are refused as overloaded (fewer, down to 4, while sends are slow); -1: no bound", "all", num(func(s *settings) *int { return &s.MaxCatchingUp })},
	{"max-groups-per-user", "CHAT_MAX_GROUPS_PER_USER", "5000", "groups a user may be a member of at once (a sync reads each, 13-16 us of Redis CPU); an add past it is refused whole", "all", num(func(s *settings) *int { return &s.MaxGroups })},
	{"max-body", "CHAT_MAX_BODY", "16384", "largest message body in bytes", "all", num(func(s *settings) *int { return &s.MaxBody })},
	{"log-level", "CHAT_LOG_LEVEL", "info", "debug, info, warn or error", "all", str(func(s *settings) *string { return &s.LogLevel })},
	{"log-format", "CHAT_LOG_FORMAT", "text", "text or json", "all", str(func(s *settings) *string { return &s.LogFormat })},
}

// minRetention is the shortest chat.messages retention chatd takes.
const minRetention = time.Hour

// parseSettings reads flags after the role name, with CHAT_* variables as
// defaults.
func parseSettings(role string, args []string, getenv func(string) string, stderr io.Writer) (*settings, error) {
	s := &settings{}
	fs := flag.NewFlagSet("chatd "+role, flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, st := range allSettings {
		def := st.def
		if v := getenv(st.env); v != "" {
			def = v
		}
		st.bind(s, fs, st.flag, def, st.usage+" ("+st.env+")")
	}
	if err := flags.Parse(fs, args); err != nil {
		return nil, err
	}
	if err := checkEnv(fs, getenv); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; flags go after the role: chatd %s -flag value", fs.Arg(0), role)
	}
	if role == "dev" && s.KafkaBrokers != "" {
		// dev runs a broker of its own: with a deployment's settings it
		// would mix its log with the deployment's Redis, and hand out
		// tokens for anyone.
		return nil, fmt.Errorf("chatd dev runs its own embedded broker, but CHAT_KAFKA_BROKERS (-kafka-brokers) is set to %q: unset it for dev, or run the production roles (gateway, fanout, persister, projector) against that Kafka", s.KafkaBrokers)
	}
	return s, s.validate(role)
}

// checkEnv refuses a CHAT_* variable that does not parse, naming it: its
// flag's default was a placeholder that validate refuses without saying
// which variable held what. A flag given instead of it wins.
func checkEnv(fs *flag.FlagSet, getenv func(string) string) error {
	envs := make([]flags.Env, len(allSettings))
	for i, st := range allSettings {
		envs[i] = flags.Env{Name: st.env, Flag: st.flag, Usage: st.usage}
	}
	return flags.CheckEnv(fs, getenv, envs)
}

// storeAddrs are the settings of the stores' addresses, checked by
// validate for a form that can be dialled.
var storeAddrs = []struct {
	setting, defaultPort, example string
	v                             func(*settings) *string
}{
	{"CHAT_KAFKA_BROKERS (-kafka-brokers)", "9092", "kafka-1:9092,kafka-2:9092", func(s *settings) *string { return &s.KafkaBrokers }},
	{"CHAT_REDIS_ADDRS (-redis-addrs)", "", "redis:6379", func(s *settings) *string { return &s.RedisAddrs }},
	{"CHAT_CLICKHOUSE_ADDRS (-clickhouse-addrs)", "", "clickhouse:9000 (the native protocol's port, not the HTTP port 8123)", func(s *settings) *string { return &s.ClickHouseAddrs }},
}

// validate checks the settings a role takes; role names which ones are
// used (a fan-out never verifies a token).
func (s *settings) validate(role string) error {
	if s.Partitions < 1 {
		return fmt.Errorf("partitions must be a whole number >= 1 (CHAT_PARTITIONS / -partitions)")
	}
	if err := topics.CheckReplicationFactor(s.Replicas); err != nil {
		return err
	}
	if role == "dev" && s.Replicas > 1 {
		return fmt.Errorf("replication-factor %d (CHAT_REPLICATION_FACTOR): chatd dev runs one embedded broker, which keeps one copy of each record; "+
			"unset it for dev, or run the production roles (gateway, fanout, persister, projector) against a Kafka cluster of %d brokers or more", s.Replicas, s.Replicas)
	}
	for _, a := range storeAddrs {
		if _, err := access.Addrs(*a.v(s), a.setting, a.defaultPort, a.example); err != nil {
			return err
		}
	}
	if s.WindowSize < -1 || s.WindowSize == 0 {
		return fmt.Errorf("window-size must be -1 (unbounded) or >= 1 (CHAT_WINDOW_SIZE / -window-size)")
	}
	for _, d := range []struct {
		name, env, use string
		v              time.Duration
	}{
		{"event-retention", "CHAT_EVENT_RETENTION", "2160h (0 keeps them)", s.EventRetention},
		{"shutdown-timeout", "CHAT_SHUTDOWN_TIMEOUT", "10s", s.ShutdownTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%s %v is negative (%s): use a positive duration, e.g. %s", d.name, d.v, d.env, d.use)
		}
	}
	for _, o := range list(s.AllowedOrigins) {
		if err := checkOrigin(o); err != nil {
			return err
		}
	}
	if (role == "dev" || role == "gateway") && s.NodeID != "" {
		// Checked by the gateway too, but only once the stores were
		// waited for, and as "gateway: node name: ...", naming no setting.
		if err := schema.ValidID(s.NodeID); err != nil {
			return fmt.Errorf("node-id %q (CHAT_NODE_ID): %v (e.g. gw-1); or leave it unset for hostname-pid", s.NodeID, err)
		}
	}
	if (role == "dev" || role == "gateway") && s.JWTSecret != "" && len(s.JWTSecret) < 32 {
		return fmt.Errorf("jwt-secret is %d bytes (CHAT_JWT_SECRET): tokens signed with it can be forged; use at least 32, e.g. the output of openssl rand -hex 32", len(s.JWTSecret))
	}
	if s.Retention >= 0 && s.Retention < minRetention { // negative: for ever, as chatctl takes it
		// chat.messages is what the persister and ClickHouse catch up
		// from: a short retention (1m is a minute, not a month) deletes
		// accepted messages before they are stored.
		return fmt.Errorf("message-retention %v is below %v (CHAT_MESSAGE_RETENTION): chat.messages must outlast any persister or ClickHouse outage; use e.g. 168h", s.Retention, minRetention)
	}
	if s.HTTPReadTimeout < time.Second || s.HTTPIdleTimeout < time.Second || s.HTTPWriteTimeout < time.Second {
		return fmt.Errorf("http-read-timeout %v, http-idle-timeout %v and http-write-timeout %v must be at least 1s (CHAT_HTTP_READ_TIMEOUT, CHAT_HTTP_IDLE_TIMEOUT, CHAT_HTTP_WRITE_TIMEOUT); use e.g. 30s, 120s and 10s",
			s.HTTPReadTimeout, s.HTTPIdleTimeout, s.HTTPWriteTimeout)
	}
	if s.ShutdownTimeout < time.Second {
		return fmt.Errorf("shutdown-timeout %v is below 1s (CHAT_SHUTDOWN_TIMEOUT): shutdown could drain nothing; use e.g. 10s", s.ShutdownTimeout)
	}
	if s.MaxTokenTTL < time.Minute {
		return fmt.Errorf("max-token-ttl %v is below 1m (CHAT_MAX_TOKEN_TTL): every token would be refused; use e.g. 720h", s.MaxTokenTTL)
	}
	if s.MaxGroups < 1 {
		return fmt.Errorf("max-groups-per-user must be a whole number >= 1 (CHAT_MAX_GROUPS_PER_USER); use e.g. 5000")
	}
	if s.ClickHouseConns < 1 {
		return fmt.Errorf("clickhouse-conns must be a whole number >= 1 (CHAT_CLICKHOUSE_CONNS); use e.g. 10")
	}
	if s.MaxAuthing < 1 {
		return fmt.Errorf("max-authenticating must be a whole number >= 1 (CHAT_MAX_AUTHENTICATING); use e.g. 10000")
	}
	if s.MaxCatchingUp < 4 && s.MaxCatchingUp != -1 {
		return fmt.Errorf("max-catching-up must be a whole number >= 4, or -1 for no bound (CHAT_MAX_CATCHING_UP); use e.g. 64")
	}
	if s.MaxBody < 1 || s.MaxBody > producers.MaxBody {
		return fmt.Errorf("max-body must be 1 to %d bytes (CHAT_MAX_BODY): what one Kafka record batch carries by default", producers.MaxBody)
	}
	if _, err := parseLevel(s.LogLevel); err != nil {
		return err
	}
	if s.LogFormat != "text" && s.LogFormat != "json" {
		return fmt.Errorf("log-format %q: want text or json (CHAT_LOG_FORMAT)", s.LogFormat)
	}
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		return fmt.Errorf("tls-cert-file %q and tls-key-file %q: set both (CHAT_TLS_CERT_FILE and CHAT_TLS_KEY_FILE) to serve HTTPS, or neither", s.TLSCertFile, s.TLSKeyFile)
	}
	if s.TLSCertFile != "" {
		if _, err := loadCerts(s.TLSCertFile, s.TLSKeyFile, nil); err != nil { // before the stores are waited for
			return err
		}
	}
	if role != "dev" {
		var err error
		if s.kafkaSecurity, err = s.KafkaSecurity(); err != nil {
			return err
		}
	}
	if _, err := s.RedisTLSClient(); err != nil {
		return err
	}
	if _, err := s.ClickHouseTLSClient(); err != nil {
		return err
	}
	return nil
}

// checkOrigin refuses a CHAT_ALLOWED_ORIGINS pattern that no browser's
// Origin can match: one with a path (a trailing "/" copied from the
// address bar), or of the WebSocket schemes. Such a pattern
// was taken, and every page of it refused as from another origin.
func checkOrigin(o string) error {
	scheme, host, hasScheme := strings.Cut(o, "://")
	if !hasScheme {
		host = o
	}
	if i := strings.IndexByte(host, '/'); i >= 0 {
		meant := host[:i]
		if hasScheme {
			meant = scheme + "://" + meant
		}
		return fmt.Errorf("allowed-origins: %q has a path (%q), which a browser's Origin never has (CHAT_ALLOWED_ORIGINS): use %q; an origin is a host (chat.example.com, *.example.com) or scheme://host[:port]", o, host[i:], meant)
	}
	// ws:// and wss:// are the server's schemes, never a page's. Other
	// schemes are origins of pages too: apps (capacitor://localhost,
	// tauri://localhost) and extensions (chrome-extension://ID).
	if hasScheme && (strings.EqualFold(scheme, "ws") || strings.EqualFold(scheme, "wss")) {
		return fmt.Errorf("allowed-origins: %q: a page's origin is http://, https:// (or an app's or extension's own scheme), not %s:// (CHAT_ALLOWED_ORIGINS): use https://%s, or the host alone (%s) for either scheme", o, scheme, host, host)
	}
	if _, err := path.Match(o, ""); err != nil {
		return fmt.Errorf("allowed-origins: %q is no host pattern (CHAT_ALLOWED_ORIGINS): %v; use hosts such as chat.example.com or *.example.com, comma-separated", o, err)
	}
	return nil
}

// redisClient is a client of the Redis at addrs (several: a cluster)
// with the settings' user, password and TLS.
func (s *settings) redisClient(addrs []string) (redis.UniversalClient, error) {
	o, err := s.RedisOptions(addrs, s.RedisPassword)
	if err != nil {
		return nil, err
	}
	return redis.NewUniversalClient(o), nil
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

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log-level %q: want debug, info, warn or error (CHAT_LOG_LEVEL)", s)
	}
	return l, nil
}

func (s *settings) logger(w io.Writer) *slog.Logger {
	level, _ := parseLevel(s.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
