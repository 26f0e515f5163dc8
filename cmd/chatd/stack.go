package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/groupchat/chatd/broker"
	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/gateway"
	"github.com/groupchat/chatd/history"
	"github.com/groupchat/chatd/internal/deployment"
	"github.com/groupchat/chatd/metrics"
	"github.com/groupchat/chatd/producers"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// stack is what one chatd process holds: its connections to Kafka, Redis
// and ClickHouse, the parts it runs, and their readiness.
type stack struct {
	role string
	s    *settings
	log  *slog.Logger

	brokers []string
	prod    *producers.Producer
	redis   *store.Redis
	// redisAddrs are where Redis is reached; ownRedis: chatd dev's
	// embedded one, which is the deployment's by construction.
	redisAddrs []string
	ownRedis   bool
	ch         *store.ClickHouse
	hist       *history.History

	gateway *gateway.Gateway // when this process serves clients

	reg     *prometheus.Registry // this process's series, served at /metrics
	metrics *metrics.Set

	parts   []part
	closers []func()  // in reverse order of opening
	stopBy  time.Time // when shutdown began, plus CHAT_SHUTDOWN_TIMEOUT
}

// part is a long-lived piece of a process.
type part struct {
	name  string
	run   func(ctx context.Context) error
	ready func() bool // nil: ready once running
}

func openStack(ctx context.Context, role string, s *settings, log *slog.Logger) (_ *stack, err error) {
	st := &stack{role: role, s: s, log: log, reg: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	st.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if st.metrics, err = metrics.New(st.reg); err != nil {
		return nil, err
	}
	var rc redis.UniversalClient
	if role == "dev" {
		if rc, err = st.openEmbedded(); err != nil {
			return nil, err
		}
	} else {
		if st.brokers = list(s.KafkaBrokers); len(st.brokers) == 0 {
			return nil, errors.New("no Kafka brokers: set CHAT_KAFKA_BROKERS or -kafka-brokers (host:port,...)")
		}
		if s.kafkaSecurity.Plaintext() {
			log.Warn("CHAT_KAFKA_SASL=plain without TLS sends the Kafka password in the clear; set CHAT_KAFKA_TLS=true unless the network is yours alone")
		}
		addrs := list(s.RedisAddrs)
		if len(addrs) == 0 {
			return nil, errors.New("no Redis: set CHAT_REDIS_ADDRS or -redis-addrs (host:port, or several for a cluster)")
		}
		if rc, err = s.redisClient(addrs); err != nil {
			return nil, err
		}
		st.closers = append(st.closers, func() { rc.Close() })
		st.redisAddrs = addrs
	}
	rc.AddHook(st.metrics.RedisHook())
	if err := waitRedis(ctx, rc, s, log); err != nil {
		return nil, err
	}

	window, retention := s.WindowSize, s.Retention
	if chAddrs := list(s.ClickHouseAddrs); len(chAddrs) > 0 && role == "fanout" {
		log.Info("the fan-out does not use ClickHouse; not connecting to it", "addrs", chAddrs)
	} else if len(chAddrs) > 0 {
		chTLS, err := s.ClickHouseTLSClient()
		if err != nil {
			return nil, err
		}
		if st.ch, err = waitClickHouse(ctx, store.ClickHouseConfig{Addrs: chAddrs, Database: s.ClickHouseDB,
			Username: s.ClickHouseUser, Password: s.ClickHousePass, MaxOpenConns: s.ClickHouseConns, Metrics: st.metrics,
			TLS: chTLS}, log); err != nil {
			return nil, err
		}
		st.closers = append(st.closers, func() { st.ch.Close() })
		log.Info("ClickHouse keeps the history", "addrs", chAddrs, "database", s.ClickHouseDB)
	} else {
		window, retention = -1, -1
		log.Info("no ClickHouse configured: the history lives in the Redis tier only and chat.messages keeps everything (the log is the history); set CHAT_CLICKHOUSE_ADDRS to keep it in ClickHouse")
	}
	if st.redis, err = store.NewRedis(rc, store.RedisConfig{WindowSize: window}); err != nil {
		return nil, err
	}
	// Without ClickHouse the log is the history (the fan-out keeps none).
	logIsHistory := st.ch == nil && role != "fanout"
	if err := waitKafka(ctx, topics.Config{Brokers: st.brokers, Security: s.kafkaSecurity, Partitions: s.Partitions,
		ReplicationFactor: s.Replicas, MessageRetention: retention, LogIsHistory: logIsHistory}, log); err != nil {
		// Only when chat.messages deletes records: the hint was added to
		// any difference, a partition count too, on a data dir made
		// without ClickHouse.
		if role == "dev" && errors.Is(err, topics.ErrOnlyCopy) {
			err = fmt.Errorf("%w\n  chatd dev on a data dir made with ClickHouse: run it with that ClickHouse again (CHAT_CLICKHOUSE_ADDRS), or start afresh: stop it and remove %s", err, s.DataDir)
		}
		return nil, err
	}
	// Before anything is written to Redis or a group joined: a role on
	// another Redis than the deployment's is refused here.
	if err := st.checkRedis(ctx, rc, role); err != nil {
		return nil, err
	}
	if err := st.checkHistoryMode(ctx, role); err != nil {
		return nil, err
	}
	if st.prod, err = producers.New(producers.Config{Brokers: st.brokers, Security: s.kafkaSecurity,
		Observe: func(topic string, d time.Duration) { st.metrics.ObserveStore("kafka", "produce "+topic, d) }}); err != nil {
		return nil, err
	}
	st.closers = append(st.closers, func() { st.prod.Close() })
	// Pages leave two connections to the persister and the projectors
	// that share the process in dev.
	if st.hist, err = history.New(history.Config{Redis: st.redis, ClickHouse: st.ch,
		ClickHouseReads: max(1, s.ClickHouseConns-2)}); err != nil {
		return nil, err
	}
	return st, nil
}

// openEmbedded starts the embedded broker and, unless CHAT_REDIS_ADDRS
// names a server, an embedded Redis. The embedded Redis starts empty: the
// projections rebuild it from the topics.
func (st *stack) openEmbedded() (redis.UniversalClient, error) {
	b, err := broker.Start(broker.Config{Listen: st.s.KafkaListen, DataDir: filepath.Join(st.s.DataDir, "kafka"), Log: st.log})
	if err != nil {
		if _, ok := errors.AsType[*fs.PathError](err); ok {
			err = fmt.Errorf("%w; set CHAT_DATA_DIR (-data-dir) to a directory chatd may write", err)
		}
		return nil, err
	}
	st.closers = append(st.closers, b.Close)
	st.brokers = []string{b.Addr()}
	st.log.Info("embedded Kafka broker", "listen", b.Addr(), "data", filepath.Join(st.s.DataDir, "kafka"))
	if addrs := list(st.s.RedisAddrs); len(addrs) > 0 {
		rc, err := st.s.redisClient(addrs)
		if err != nil {
			return nil, err
		}
		st.closers = append(st.closers, func() { rc.Close() })
		st.redisAddrs = addrs
		return rc, nil
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded Redis: %w", err)
	}
	st.closers = append(st.closers, mr.Close)
	// Its port is another at each start: the address is kept in the data
	// dir while it runs, for chatctl (CHAT_REDIS_ADDRS=$(cat data/redis-addr)).
	addrFile := filepath.Join(st.s.DataDir, "redis-addr")
	if err := os.WriteFile(addrFile, []byte(mr.Addr()+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("embedded Redis: %w; set CHAT_DATA_DIR (-data-dir) to a directory chatd may write", err)
	}
	st.closers = append(st.closers, func() {
		if b, _ := os.ReadFile(addrFile); strings.TrimSpace(string(b)) == mr.Addr() { // not another chatd's since
			os.Remove(addrFile)
		}
	})
	st.log.Info("embedded Redis; its state is rebuilt from the topics at every start", "addr", mr.Addr(), "addr_file", addrFile)
	st.redisAddrs, st.ownRedis = []string{mr.Addr()}, true
	rc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	st.closers = append(st.closers, func() { rc.Close() })
	return rc, nil
}

func (st *stack) base() consumers.Base {
	return consumers.Base{Brokers: st.brokers, Security: st.s.kafkaSecurity, DeadLetter: st.prod, Logger: st.log, Metrics: st.metrics}
}

// run serves HTTP and runs every part until ctx ends or one fails, then
// drains within the shutdown timeout.
func (st *stack) run(ctx context.Context) error {
	ln, err := net.Listen("tcp", st.s.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP listen on %s: %w; set CHAT_HTTP_ADDR (-http-addr) to a free host:port, e.g. %s", st.s.HTTPAddr, err, otherAddr(st.s.HTTPAddr, err, "127.0.0.1:8080 or :8080"))
	}
	// Only gateways serve clients over TLS: the other roles' probes and
	// scrapes stay plain HTTP, whatever settings they share.
	scheme := "http"
	var certs *certFiles
	if st.s.TLSCertFile != "" && st.gateway != nil {
		if certs, err = loadCerts(st.s.TLSCertFile, st.s.TLSKeyFile, st.log); err != nil {
			ln.Close()
			return err
		}
		ln, scheme = tls.NewListener(ln, certs.tlsConfig()), "https"
	} else if st.s.TLSCertFile != "" {
		st.log.Info("CHAT_TLS_CERT_FILE is a gateway's: this role serves /readyz and /metrics over plain HTTP")
	}
	srv := st.s.httpServer(st.routes(), st.gateway != nil) // the API waits on the stores
	st.log.Info("serving "+strings.ToUpper(scheme), "addr", ln.Addr().String())
	if st.gateway != nil {
		st.log.Info("web client: open it in a browser", "url", scheme+"://"+ln.Addr().String()+"/")
	}

	g, gctx := errgroup.WithContext(ctx)
	// The side listeners close at shutdown, or when run returns early.
	side, closeSide := context.WithCancel(gctx)
	defer closeSide()
	if certs != nil {
		go certs.watch(side)
	}
	if st.s.MetricsAddr != "" {
		m, err := st.serveMetrics(side)
		if err != nil {
			ln.Close()
			return err
		}
		st.log.Info("serving /metrics", "addr", m)
	}
	if st.s.DebugAddr != "" {
		dbg, err := st.s.serveDebug(side)
		if err != nil {
			ln.Close()
			return err
		}
		st.log.Info("serving the profiler", "addr", dbg)
		if !loopback(dbg) {
			st.log.Warn("the profiler listens beyond this machine: anyone who reaches it can read chatd's memory and stall it; set CHAT_DEBUG_ADDR to 127.0.0.1:PORT", "addr", dbg)
		}
	}
	for _, p := range st.parts {
		g.Go(func() error {
			if err := p.run(gctx); err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			return nil
		})
	}
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), st.s.ShutdownTimeout)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		st.log.Info("stopped")
		return err
	case <-ctx.Done():
	}
	st.log.Info("shutting down", "deadline", st.s.ShutdownTimeout)
	st.stopBy = time.Now().Add(st.s.ShutdownTimeout)
	select {
	case err := <-done:
		st.log.Info("stopped")
		return err
	case <-time.After(st.s.ShutdownTimeout):
		return fmt.Errorf("shutdown did not finish within %v (CHAT_SHUTDOWN_TIMEOUT)", st.s.ShutdownTimeout)
	}
}

// checkRedis keeps the roles of one deployment on one Redis (package
// deployment): a role whose Redis is not the one the deployment's Kafka
// records is refused, before it writes to Redis or joins a consumer
// group. The check runs again whenever the Redis client dials a new
// connection.
func (st *stack) checkRedis(ctx context.Context, rc redis.UniversalClient, role string) error {
	client, done := topics.NewClient(st.brokers, st.s.kafkaSecurity, 10*time.Second)
	defer done()
	id, err := deployment.Check(ctx, deployment.Config{Redis: st.redis, Kafka: client, Addrs: st.redisAddrs,
		Own: st.ownRedis, Replicas: st.s.Replicas, Log: st.log})
	if err != nil {
		if errors.Is(err, deployment.ErrNotTheDeploymentsRedis) {
			err = fmt.Errorf("%s refused to start: %w", role, err)
		}
		return err
	}
	if !st.ownRedis {
		w := &deployment.Watcher{Redis: st.redis, ID: id, Addrs: st.redisAddrs, Log: st.log}
		w.Watch(rc)
		st.parts = append(st.parts, part{name: "redis-fence", run: w.Run})
	}
	return nil
}

// checkHistoryMode keeps the roles of one deployment agreeing on where the
// history lives. A role with ClickHouse records it in Redis; a gateway,
// persister or projector without ClickHouse then refuses to start: beside
// a persister that trims the window into ClickHouse, a gateway without it
// answers every older pull `unavailable`, and a projector without it
// leaves the analysts' tables without its rows.
//
// The record names the database: a role given another one would write
// its share of the history where the others never read it.
func (st *stack) checkHistoryMode(ctx context.Context, role string) error {
	mode, err := st.redis.HistoryMode(ctx)
	if err != nil {
		return err
	}
	db, inClickHouse := strings.CutPrefix(mode, store.HistoryInClickHouse)
	db = strings.TrimPrefix(db, ":") // "clickhouse" alone: recorded before the database was
	if st.ch != nil {
		if db != "" && db != st.s.ClickHouseDB {
			return fmt.Errorf("this deployment keeps its history in ClickHouse database %q (a role with it has run on this Redis), but this %s has %q: "+
				"set CHAT_CLICKHOUSE_DATABASE as the other roles have it; if the deployment moved to %q for good, delete the Redis key chat:history once every role has the new setting",
				db, role, st.s.ClickHouseDB, st.s.ClickHouseDB)
		}
		return st.redis.SetHistoryMode(ctx, store.HistoryInClickHouse+":"+st.s.ClickHouseDB)
	}
	if role == "fanout" || role == "dev" || !inClickHouse {
		return nil // the fan-out reads no history; dev has a Redis of its own
	}
	return fmt.Errorf("this deployment keeps its history in ClickHouse (a role with CHAT_CLICKHOUSE_ADDRS has run on this Redis), but this %s has none: "+
		"set CHAT_CLICKHOUSE_ADDRS (and CHAT_CLICKHOUSE_DATABASE) as the other roles have them; if the deployment no longer uses ClickHouse, delete the Redis key chat:history", role)
}

// close closes what openStack opened, within what is left of the shutdown
// deadline (a second at least): a producer waiting on a broker that stopped
// answering must not keep the process up past it, where an orchestrator
// kills it anyway.
func (st *stack) close() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := len(st.closers) - 1; i >= 0; i-- {
			st.closers[i]()
		}
	}()
	left := st.s.ShutdownTimeout
	if !st.stopBy.IsZero() {
		left = max(time.Until(st.stopBy), time.Second)
	}
	select {
	case <-done:
	case <-time.After(left):
		st.log.Error("closing the connections did not finish within the shutdown deadline (CHAT_SHUTDOWN_TIMEOUT); exiting without waiting for them", "waited", left.Round(time.Millisecond))
	}
}
