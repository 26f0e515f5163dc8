package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/tlsclient"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// The waits of a role's start for its stores: an outage that waiting
// mends is waited out; a setting that is wrong ends the start at once,
// naming it.

// startWait is how long a role waits at start for Redis, ClickHouse or
// Kafka, so that a role restarted during a short outage of one of them (a
// restart, an upgrade, a deployment that starts everything at once) waits
// for it instead of exiting in a loop.
var startWait = 60 * time.Second

// waitStart calls try every 2 s until it succeeds, for up to startWait,
// saying each time that it waits. An error that waiting cannot mend (a
// setting, a topic that differs from its spec) ends it at once. hint says
// what to check when the wait runs out, unless the last error says it
// (saysWhatToDo).
func waitStart(ctx context.Context, log *slog.Logger, what, hint string, try func() error, lasting func(error) bool) error {
	deadline := time.Now().Add(startWait)
	for {
		err := try()
		if err == nil || lasting(err) || ctx.Err() != nil {
			return err
		}
		if time.Now().After(deadline) {
			if saysWhatToDo(err) {
				return fmt.Errorf("%s: %w; waited %v", what, err, startWait)
			}
			return fmt.Errorf("%s: %w; waited %v; %s", what, err, startWait, hint)
		}
		log.Warn(what+" is not ready; waiting for it", "err", err, "gives_up_in", time.Until(deadline).Round(time.Second))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func never(error) bool { return false }

// saysWhatToDo tells an error that names the settings that mend it, after
// which the wait's general hint would mislead: too few brokers for the
// replication factor asked (waited for, as some may be starting).
func saysWhatToDo(err error) bool { return errors.Is(err, topics.ErrTooFewBrokers) }

func waitRedis(ctx context.Context, rc redis.UniversalClient, s *settings, log *slog.Logger) error {
	hint := "check CHAT_REDIS_ADDRS and that redis-server runs"
	if !s.RedisTLS && s.RedisCAFile == "" {
		hint += "; if it takes TLS connections only, set CHAT_REDIS_TLS=true"
	}
	return waitStart(ctx, log, "Redis at "+s.RedisAddrs, hint,
		func() error {
			err := rc.Ping(ctx).Err()
			if redis.IsAuthError(err) {
				return fmt.Errorf("Redis refused the user or password: %w; set CHAT_REDIS_PASSWORD (-redis-password), and CHAT_REDIS_USER for an ACL user, to what Redis requires", err)
			}
			var reply redis.Error // an answer in Redis's protocol: Redis is there (loading, say)
			if err != nil && !tlsclient.Failed(err) && !errors.As(err, &reply) {
				tc, _ := s.RedisTLSClient()
				if addr, status := answersHTTP(ctx, list(s.RedisAddrs), tc.Config()); addr != "" {
					return fmt.Errorf("CHAT_REDIS_ADDRS names %s, which answers HTTP (%s): %w; set it to redis-server's port (6379 by default) (Redis said: %v)", addr, status, errNotTheServer, err)
				}
			}
			return tlsclient.Hint(err, "CHAT_REDIS_TLS", "CHAT_REDIS_CA_FILE", "Redis's")
		}, func(err error) bool { // waiting mends none of these
			return redis.IsAuthError(err) || tlsclient.Failed(err) || errors.Is(err, errNotTheServer)
		})
}

// errNotTheServer is an address of a store's setting that answers HTTP:
// no Kafka broker nor Redis speaks it. A role pointed at one (a gateway's
// port, ClickHouse's) waited the whole start wait for a handshake that
// could not succeed.
var errNotTheServer = errors.New("an HTTP server, not the store")

// answersHTTP returns the first of addrs that answers an HTTP request,
// with the status it answered, or "". Only a store that failed is asked:
// over TLS when tc is set.
func answersHTTP(ctx context.Context, addrs []string, tc *tls.Config) (addr, status string) {
	scheme := "http"
	tr := &http.Transport{DisableKeepAlives: true}
	if tc != nil {
		scheme, tr.TLSClientConfig = "https", tc.Clone()
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, a := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+a+"/", nil)
		if err != nil {
			continue
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			return a, resp.Status
		}
	}
	return "", ""
}

// waitClickHouse opens ClickHouse and applies the migrations.
func waitClickHouse(ctx context.Context, cfg store.ClickHouseConfig, log *slog.Logger) (ch *store.ClickHouse, err error) {
	hint := "check CHAT_CLICKHOUSE_ADDRS (the native protocol's port, 9000 by default, not the HTTP port 8123) and that clickhouse-server runs"
	if cfg.TLS == nil {
		hint += "; for its secure port (9440), set CHAT_CLICKHOUSE_TLS=true"
	} else {
		hint += "; CHAT_CLICKHOUSE_TLS wants its secure port (9440), not 9000"
	}
	err = waitStart(ctx, log, "ClickHouse at "+strings.Join(cfg.Addrs, ","), hint,
		func() (err error) {
			if ch, err = store.OpenClickHouse(ctx, cfg); clickHouseRefusedLogin(err) {
				return fmt.Errorf("ClickHouse refused user %q: %w; set CHAT_CLICKHOUSE_USER and CHAT_CLICKHOUSE_PASSWORD to a user of it", cfg.Username, err)
			}
			if err != nil && !tlsclient.Failed(err) {
				if addr := clickHouseHTTPPort(ctx, cfg); addr != "" {
					return fmt.Errorf("CHAT_CLICKHOUSE_ADDRS names %s, which answers /ping as %w does (8123 by default), where chatd speaks the native protocol (9000 by default, 9440 over TLS): "+
						"set it to the native port, the <tcp_port> of ClickHouse's config (the handshake there failed: %v)", addr, errHTTPPort, err)
				}
			}
			return tlsclient.Hint(err, "CHAT_CLICKHOUSE_TLS", "CHAT_CLICKHOUSE_CA_FILE", "ClickHouse's")
		}, func(err error) bool {
			return clickHouseRefusedLogin(err) || tlsclient.Failed(err) || errors.Is(err, errHTTPPort)
		})
	return ch, err
}

// errHTTPPort is ClickHouse's HTTP interface given for its native port:
// the handshake waits there until it times out, at every try of the start
// wait, which then ran its whole minute.
var errHTTPPort = errors.New("ClickHouse's HTTP interface")

// clickHouseHTTPPort returns the first of cfg's addresses that answers
// GET /ping with ClickHouse's HTTP interface's "Ok.", or "". Its native
// port answers an HTTP request too, but 400 ("Port 9000 is for
// clickhouse-client program").
func clickHouseHTTPPort(ctx context.Context, cfg store.ClickHouseConfig) string {
	scheme := "http"
	tr := &http.Transport{DisableKeepAlives: true}
	if cfg.TLS != nil {
		scheme, tr.TLSClientConfig = "https", cfg.TLS.Config()
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	for _, addr := range cfg.Addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+addr+"/ping", nil)
		if err != nil {
			continue
		}
		resp, err := client.Do(req)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "Ok." {
			return addr
		}
	}
	return ""
}

// clickHouseRefusedLogin tells a user or password ClickHouse refused, which
// waiting does not mend, from an outage: UNKNOWN_USER, WRONG_PASSWORD,
// REQUIRED_PASSWORD (18.16) and AUTHENTICATION_FAILED (later releases).
func clickHouseRefusedLogin(err error) bool {
	var ex *clickhouse.Exception
	if !errors.As(err, &ex) {
		return false
	}
	switch ex.Code {
	case 192, 193, 194, 516:
		return true
	}
	return false
}

// waitKafka creates or checks the topics. Only a broker that cannot be
// reached, or that is not ready to answer, is waited for: a topic that
// differs from its spec, or a refused request, ends the start at once.
func waitKafka(ctx context.Context, cfg topics.Config, log *slog.Logger) error {
	hint := "check CHAT_KAFKA_BROKERS and that the brokers run"
	if cfg.Security.TLS == nil {
		hint += "; if their listener takes TLS (SSL or SASL_SSL), set CHAT_KAFKA_TLS=true"
	} else {
		hint += "; if their listener is plaintext (PLAINTEXT or SASL_PLAINTEXT), unset CHAT_KAFKA_TLS and CHAT_KAFKA_CA_FILE"
	}
	if cfg.Security.SASL != nil {
		hint += "; a broker that drops the connection at login may have refused CHAT_KAFKA_SASL_USER and CHAT_KAFKA_SASL_PASSWORD"
	}
	return waitStart(ctx, log, "Kafka at "+strings.Join(cfg.Brokers, ","), hint,
		func() error {
			err := topics.Ensure(ctx, cfg, log)
			if errors.Is(err, kafka.SASLAuthenticationFailed) || errors.Is(err, kafka.UnsupportedSASLMechanism) || errors.Is(err, kafka.IllegalSASLState) {
				return fmt.Errorf("the brokers refused chatd's SASL login: %w; set CHAT_KAFKA_SASL (%s), CHAT_KAFKA_SASL_USER and CHAT_KAFKA_SASL_PASSWORD to what their listener takes",
					err, strings.Join(topics.SASLMechanisms, ", "))
			}
			if err != nil && brokerUnreachable(err) && !tlsclient.Failed(err) {
				if addr, status := answersHTTP(ctx, cfg.Brokers, cfg.Security.TLS.Config()); addr != "" {
					return fmt.Errorf("CHAT_KAFKA_BROKERS names %s, which answers HTTP (%s): %w; set it to the brokers' Kafka listeners (9092 by default) (Kafka's client said: %v)", addr, status, errNotTheServer, err)
				}
			}
			return err // topics names the TLS settings a failed handshake wants
		}, func(err error) bool {
			// Too few brokers may be one restarting: waited for, and
			// said at the end of the wait.
			return (!brokerUnreachable(err) && !errors.Is(err, topics.ErrTooFewBrokers)) || tlsclient.Failed(err)
		})
}

// brokerUnreachable tells a network failure, or a broker still starting,
// from an answer that waiting does not change.
func brokerUnreachable(err error) bool {
	var ne net.Error
	var ke kafka.Error
	switch {
	case errors.As(err, &ke):
		return ke.Temporary()
	case errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return false
}
