package chaos

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/store"
)

// The secrets of the run's deployment.
const (
	jwtSecret  = "chaos-secret-chaos-secret-chaos-secret"
	adminToken = "chaos-admin-token"
)

// cluster is every process of the system under test.
type cluster struct {
	dir        string
	partitions int

	redisSrv *testserver.Redis
	chSrv    *testserver.ClickHouse
	broker   *proc
	kafka    string           // the broker's address, the same across restarts
	kt       *kafka.Transport // the harness's connections to it, closed by stop

	roles    map[string]*proc // gateway1, gateway2, fanout, persister, projector
	gateways []string         // HTTP base URLs of the gateways

	rc    redis.UniversalClient
	redis *store.Redis

	exitMu sync.Mutex
	exits  []string // processes that exited without being killed
}

// roleNames lists the chatd processes in a fixed order.
var roleNames = []string{"gateway1", "gateway2", "fanout", "persister", "projector"}

func startCluster(ctx context.Context, dir string, partitions, window int, tl *timeline) (_ *cluster, err error) {
	c := &cluster{dir: dir, partitions: partitions, roles: map[string]*proc{}, kt: &kafka.Transport{}}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	bin := filepath.Join(dir, "bin")
	logs := filepath.Join(dir, "logs")
	for _, d := range []string{bin, logs} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	tl.note("building chatd and chatbroker")
	if err := buildBinaries(ctx, bin); err != nil {
		return nil, err
	}
	if c.redisSrv, err = testserver.StartRedis(filepath.Join(dir, "redis")); err != nil {
		return nil, fmt.Errorf("%w\ninstall it with `make deps` (apt-get install redis-server)", err)
	}
	chDir := filepath.Join(dir, "clickhouse")
	if err := os.MkdirAll(chDir, 0o755); err != nil {
		return nil, err
	}
	if c.chSrv, err = testserver.StartClickHouse(chDir); err != nil {
		return nil, fmt.Errorf("%w\ninstall it with `make deps` (apt-get install clickhouse-server)", err)
	}
	onExit := func(name string, err error, _ bool) {
		why := lastLine(filepath.Join(logs, name+".log"))
		tl.note(fmt.Sprintf("%s exited by itself (%v: %s); restarting it in 1 s", name, err, why))
		c.exitMu.Lock()
		c.exits = append(c.exits, fmt.Sprintf("%s: %v: %s", name, err, why))
		c.exitMu.Unlock()
	}
	port, err := testserver.FreePort()
	if err != nil {
		return nil, err
	}
	c.kafka = "127.0.0.1:" + strconv.Itoa(port)
	c.broker = newProc("broker", filepath.Join(bin, "chatbroker"), filepath.Join(logs, "broker.log"), "", nil,
		"-listen", c.kafka, "-data-dir", filepath.Join(dir, "kafka"), "-partitions", strconv.Itoa(partitions))
	c.broker.onExit = onExit
	go c.broker.supervise()
	if err := c.waitKafka(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("chatbroker: %w; its log: %s", err, c.broker.logPath)
	}

	env := []string{
		"CHAT_KAFKA_BROKERS=" + c.kafka,
		"CHAT_REDIS_ADDRS=" + c.redisSrv.Addr,
		"CHAT_CLICKHOUSE_ADDRS=" + c.chSrv.Addr,
		"CHAT_PARTITIONS=" + strconv.Itoa(partitions),
		"CHAT_WINDOW_SIZE=" + strconv.Itoa(window),
		"CHAT_JWT_SECRET=" + jwtSecret,
		"CHAT_ADMIN_TOKEN=" + adminToken,
		"CHAT_SHUTDOWN_TIMEOUT=5s",
		"CHAT_LOG_LEVEL=info",
	}
	for _, name := range roleNames {
		port, err := testserver.FreePort()
		if err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		role := name
		penv := append([]string{"CHAT_HTTP_ADDR=" + addr}, env...)
		if len(name) > 7 && name[:7] == "gateway" {
			role = "gateway"
			penv = append(penv, "CHAT_NODE_ID="+name)
			c.gateways = append(c.gateways, "http://"+addr)
		}
		p := newProc(name, filepath.Join(bin, "chatd"), filepath.Join(logs, name+".log"), "http://"+addr+"/healthz", penv, role)
		p.onExit = onExit
		c.roles[name] = p
		go p.supervise()
	}
	for _, name := range roleNames {
		if err := c.roles[name].waitHealthy(ctx, 90*time.Second); err != nil {
			return nil, err
		}
	}
	c.rc = redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{c.redisSrv.Addr}, MaxRetries: -1})
	if c.redis, err = store.NewRedis(c.rc, store.RedisConfig{}); err != nil {
		return nil, err
	}
	return c, nil
}

// waitKafka waits until the broker answers metadata with the chat topics.
func (c *cluster) waitKafka(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	client := c.client(time.Second)
	for {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{})
		if err == nil && len(md.Topics) >= 5 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no Kafka metadata with the chat topics from %s after %v (%v)", c.kafka, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// allUp waits until every process answers again (after the faults).
func (c *cluster) allUp(ctx context.Context, d time.Duration) error {
	if err := c.waitKafka(ctx, d); err != nil {
		return err
	}
	for _, name := range roleNames {
		if err := c.roles[name].waitHealthy(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, p := range c.roles {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
	if c.broker != nil {
		c.broker.stop()
	}
	c.kt.CloseIdleConnections()
	if c.rc != nil {
		c.rc.Close()
	}
	if c.redisSrv != nil {
		c.redisSrv.Stop()
	}
	if c.chSrv != nil {
		c.chSrv.Stop()
	}
}

// unexpectedExits lists the processes that died without being killed.
func (c *cluster) unexpectedExits() []string {
	c.exitMu.Lock()
	defer c.exitMu.Unlock()
	return append([]string(nil), c.exits...)
}

// client is a Kafka client of the broker on the harness's connections.
func (c *cluster) client(timeout time.Duration) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(c.kafka), Timeout: timeout, Transport: c.kt}
}

// endOffsets returns the end offset of every partition of topic.
func (c *cluster) endOffsets(ctx context.Context, topic string) (map[int]int64, error) {
	client := c.client(5 * time.Second)
	req := map[string][]kafka.OffsetRequest{}
	for p := 0; p < c.partitions; p++ {
		req[topic] = append(req[topic], kafka.LastOffsetOf(p))
	}
	resp, err := client.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: req})
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			return nil, p.Error
		}
		out[p.Partition] = p.LastOffset
	}
	return out, nil
}

// caughtUp reports whether consumer (which keeps its offsets in Redis) has
// made every record of topic before ends durable.
func (c *cluster) caughtUp(ctx context.Context, consumer, topic string, ends map[int]int64) bool {
	saved, err := c.redis.Offsets(ctx, consumer, topic)
	if err != nil {
		return false
	}
	for p, end := range ends {
		if end > 0 && saved[p] < end {
			return false
		}
	}
	return true
}

// waitCaughtUp waits until consumer has read topic to its current end.
func (c *cluster) waitCaughtUp(ctx context.Context, consumer, topic string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		ends, err := c.endOffsets(ctx, topic)
		if err == nil && c.caughtUp(ctx, consumer, topic, ends) {
			return nil
		}
		if time.Now().After(deadline) {
			saved, _ := c.redis.Offsets(ctx, consumer, topic)
			return fmt.Errorf("%s has not caught up with %s after %v: ends %v, saved %v (err %v)", consumer, topic, d, ends, saved, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lastLine returns the last line of a log file (what a process said as it
// died).
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\n")
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}
