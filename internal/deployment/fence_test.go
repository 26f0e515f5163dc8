package deployment

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/internal/testserver"
	"github.com/groupchat/chatd/store"
	"github.com/groupchat/chatd/topics"
)

// server is one Redis as the tests reach it.
type server struct {
	addr string
	rc   *redis.Client
	r    *store.Redis
}

// quiet is the log of the roles the tests play.
var quiet = slog.New(slog.DiscardHandler)

func realRedis(t *testing.T) server {
	t.Helper()
	return reach(t, testserver.NewRedis(t).Addr)
}

func reach(t *testing.T, addr string) server {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rc.Close() })
	r, err := store.NewRedis(rc, store.RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return server{addr, rc, r}
}

func kafkaOf(t *testing.T) *kafka.Client {
	t.Helper()
	b := testserver.NewBroker(t)
	client, done := topics.NewClient([]string{b.Addr()}, topics.Security{}, 10*time.Second)
	t.Cleanup(done)
	return client
}

func (s server) cfg(k *kafka.Client) Config {
	return Config{Redis: s.r, Kafka: k, Addrs: []string{s.addr}, RecordWait: 300 * time.Millisecond, Log: quiet}
}

func (s server) keys(t *testing.T) []string {
	t.Helper()
	keys, err := s.rc.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// The first role of a fresh deployment claims its Redis and records it;
// roles starting at once agree on one id (the Redis's SET NX decides).
func TestAFreshDeploymentClaimsItsRedisOnce(t *testing.T) {
	ctx := context.Background()
	k, s := kafkaOf(t), realRedis(t)
	ids := make([]string, 4)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			cfg := s.cfg(k)
			cfg.RecordWait = 10 * time.Second // the claimer's record may take a while on a busy machine
			id, err := Check(ctx, cfg)
			if err != nil {
				t.Errorf("role %d of a fresh deployment: %v", i, err)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids[1:] {
		if id != ids[0] || id == "" {
			t.Fatalf("roles starting together on a fresh deployment took ids %q, want one", ids)
		}
	}
	rec, err := Read(ctx, k)
	if err != nil || rec == nil || rec.RedisID != ids[0] || !rec.names([]string{s.addr}) {
		t.Fatalf("Kafka's record after a fresh start: %+v, %v; want id %s at %s", rec, err, ids[0], s.addr)
	}
	if held, _ := s.r.Deployment(ctx); held != ids[0] {
		t.Fatalf("the Redis holds id %q, want %q", held, ids[0])
	}
}

// The deployment's Redis restarted with its data, or reached by another
// role under another spelling of its address, is taken: the ids agree.
// The new spelling is learnt, so that it is known after a loss of data.
func TestTheDeploymentsRedisIsTakenUnderAnyAddress(t *testing.T) {
	ctx := context.Background()
	k, s := kafkaOf(t), realRedis(t)
	id, err := Check(ctx, s.cfg(k))
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(s.addr, "127.0.0.1", "localhost", 1)
	again, err := Check(ctx, Config{Redis: s.r, Kafka: k, Addrs: []string{other}, Log: quiet})
	if err != nil || again != id {
		t.Fatalf("the same Redis at %s: %q, %v; want %q", other, again, err, id)
	}
	rec, _ := Read(ctx, k)
	if rec == nil || !rec.names([]string{other}) || !rec.names([]string{s.addr}) {
		t.Fatalf("the record after a second spelling: %+v; want both addresses", rec)
	}
}

// A Redis at the deployment's address that lost its data is the
// deployment's: it gets its id back and the role goes on (its consumers
// then replay the topics into it, as after any loss).
func TestTheDeploymentsRedisAfterALossOfDataIsTakenBack(t *testing.T) {
	ctx := context.Background()
	k, s := kafkaOf(t), realRedis(t)
	id, err := Check(ctx, s.cfg(k))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	again, err := Check(ctx, s.cfg(k))
	if err != nil || again != id {
		t.Fatalf("the deployment's Redis after a flush: %q, %v; want it taken back as %q", again, err, id)
	}
	if held, _ := s.r.Deployment(ctx); held != id {
		t.Fatalf("the flushed Redis holds id %q, want %q back", held, id)
	}
}

// An empty Redis at another address, or one of another deployment, is
// refused with what to do, and nothing is written to it.
func TestAnotherRedisIsRefusedAndLeftAlone(t *testing.T) {
	ctx := context.Background()
	k, prod := kafkaOf(t), realRedis(t)
	if _, err := Check(ctx, prod.cfg(k)); err != nil {
		t.Fatal(err)
	}
	empty := realRedis(t)
	_, err := Check(ctx, empty.cfg(k))
	if !errors.Is(err, ErrNotTheDeploymentsRedis) {
		t.Fatalf("an empty Redis at another address: %v, want ErrNotTheDeploymentsRedis", err)
	}
	for _, want := range []string{empty.addr, prod.addr, "CHAT_REDIS_ADDRS", "chatctl redis adopt"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal %q does not name %q", err, want)
		}
	}
	if keys := empty.keys(t); len(keys) != 0 {
		t.Fatalf("the refused Redis was written: %q", keys)
	}

	staging := realRedis(t)
	staging.rc.Set(ctx, "chat:deployment", "0123abcd", 0)
	staging.rc.Set(ctx, "chat:{g}:head", "7", 0)
	_, err = Check(ctx, Config{Redis: staging.r, Kafka: k, Addrs: []string{prod.addr}, Log: quiet}) // even at the recorded address
	if !errors.Is(err, ErrNotTheDeploymentsRedis) || !strings.Contains(err.Error(), "another deployment (its id 0123abcd)") {
		t.Fatalf("another deployment's Redis: %v, want it refused naming its id", err)
	}
	if keys := staging.keys(t); len(keys) != 2 {
		t.Fatalf("the other deployment's Redis holds %q after the refusal, want its two keys alone", keys)
	}
}

// A Redis with an id while Kafka records none is another deployment's (a
// role given the wrong Kafka), or the record was lost: refused, since the
// role would write this Kafka's state over that deployment's.
func TestARedisWithAnIdOnAKafkaWithoutARecordIsRefused(t *testing.T) {
	ctx := context.Background()
	s := realRedis(t)
	if _, err := Check(ctx, s.cfg(kafkaOf(t))); err != nil {
		t.Fatal(err)
	}
	s.rc.Set(ctx, "chat:history", "clickhouse", 0) // as the deployment's roles write
	_, err := Check(ctx, s.cfg(kafkaOf(t)))
	if !errors.Is(err, ErrNotTheDeploymentsRedis) || !strings.Contains(err.Error(), "CHAT_KAFKA_BROKERS") || !strings.Contains(err.Error(), "chatctl redis adopt") {
		t.Fatalf("a Redis with an id on another Kafka: %v, want a refusal naming CHAT_KAFKA_BROKERS and chatctl redis adopt", err)
	}
}

// chatd dev's embedded Redis is new and empty at every start: it is the
// deployment's by construction, and the record follows its address.
func TestAnOwnRedisIsAdoptedAtEveryStart(t *testing.T) {
	ctx := context.Background()
	k := kafkaOf(t)
	var first string
	for i := range 2 {
		s := reach(t, miniredis.RunT(t).Addr())
		cfg := s.cfg(k)
		cfg.Own = true
		id, err := Check(ctx, cfg)
		if err != nil {
			t.Fatalf("start %d of an own Redis: %v", i, err)
		}
		if i == 0 {
			first = id
		} else if id != first {
			t.Fatalf("the own Redis of the second start got id %q, want the deployment's %q", id, first)
		}
		if rec, _ := Read(ctx, k); rec == nil || len(rec.Addrs) != 1 || rec.Addrs[0] != s.addr {
			t.Fatalf("the record after start %d: %+v, want the own Redis's address alone", i, rec)
		}
	}
}

// chatctl redis adopt moves the deployment to a new Redis for good: roles
// on it are taken, and roles on the Redis used before are refused.
func TestAdoptMovesTheDeploymentToANewRedis(t *testing.T) {
	ctx := context.Background()
	k, old, next := kafkaOf(t), realRedis(t), realRedis(t)
	if _, err := Check(ctx, old.cfg(k)); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(ctx, next.cfg(k)); !errors.Is(err, ErrNotTheDeploymentsRedis) {
		t.Fatalf("a new Redis before it is adopted: %v, want refused", err)
	}
	id, err := Adopt(ctx, next.cfg(k))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Check(ctx, next.cfg(k)); err != nil || got != id {
		t.Fatalf("the adopted Redis: %q, %v; want taken as %q", got, err, id)
	}
	if _, err := Check(ctx, old.cfg(k)); !errors.Is(err, ErrNotTheDeploymentsRedis) {
		t.Fatalf("the Redis used before the adoption: %v, want refused", err)
	}
}

// chatd dev's embedded Redis ends with the process, so a deployment that
// ran on it (its topics kept in a data dir) takes an empty Redis given
// later in CHAT_REDIS_ADDRS as its own; a Redis of another deployment is
// still refused.
func TestAnEmptyRedisFollowsAnEmbeddedOne(t *testing.T) {
	ctx := context.Background()
	k := kafkaOf(t)
	own := reach(t, miniredis.RunT(t).Addr())
	cfg := own.cfg(k)
	cfg.Own = true
	id, err := Check(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	other := realRedis(t)
	if _, err := other.r.ClaimDeployment(ctx, "0123abcd"); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(ctx, other.cfg(k)); !errors.Is(err, ErrNotTheDeploymentsRedis) {
		t.Fatalf("another deployment's Redis after an embedded one: %v, want refused", err)
	}
	next := realRedis(t)
	got, err := Check(ctx, next.cfg(k))
	if err != nil {
		t.Fatalf("an empty Redis after an embedded one: %v, want taken", err)
	}
	if got == id {
		t.Fatalf("the Redis after an embedded one took the embedded one's id %q, want an id of its own", id)
	}
	if rec, _ := Read(ctx, k); rec == nil || rec.Embedded || len(rec.Addrs) != 1 || rec.Addrs[0] != next.addr {
		t.Fatalf("the record after the move: %+v, want the new Redis's address alone, not embedded", rec)
	}
	again := reach(t, miniredis.RunT(t).Addr())
	cfg = again.cfg(k)
	cfg.Own = true
	if _, err := Check(ctx, cfg); err != nil {
		t.Fatalf("chatd dev on a new embedded Redis again: %v", err)
	}
}

// A role whose Kafka client looked at the brokers before another role
// made chat.deployment reads the record all the same: the client's view
// of the topics lags the brokers' by up to its metadata's lifetime.
func TestARecordMadeByAnotherRoleIsReadAtOnce(t *testing.T) {
	ctx := context.Background()
	b := testserver.NewBroker(t)
	k1, done1 := topics.NewClient([]string{b.Addr()}, topics.Security{}, 10*time.Second)
	t.Cleanup(done1)
	k2, done2 := topics.NewClient([]string{b.Addr()}, topics.Security{}, 10*time.Second)
	t.Cleanup(done2)
	s := realRedis(t)
	if rec, err := Read(ctx, k1); err != nil || rec != nil {
		t.Fatalf("before any role: %+v, %v; want no record", rec, err)
	}
	id, err := Check(ctx, s.cfg(k2))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := Read(ctx, k1)
	if err != nil || rec == nil || rec.RedisID != id {
		t.Fatalf("the record another role made, read by a client that looked before: %+v, %v; want Redis %s", rec, err, id)
	}
	if got, err := Check(ctx, s.cfg(k1)); err != nil || got != id {
		t.Fatalf("a role whose client looked before: %q, %v; want %s", got, err, id)
	}
}

// A fresh deployment's first role stopped between its claim of the Redis
// and the record in Kafka (killed, or its produce failed): the next role
// takes the Redis, which nothing used since, rather than refuse every
// start until an operator adopts it.
func TestAClaimNeverRecordedIsTakenByTheNextRole(t *testing.T) {
	ctx := context.Background()
	k, s := kafkaOf(t), realRedis(t)
	if _, err := s.r.ClaimDeployment(ctx, "0123abcd"); err != nil {
		t.Fatal(err)
	}
	id, err := Check(ctx, s.cfg(k))
	if err != nil || id != "0123abcd" {
		t.Fatalf("the next role on a Redis claimed but never recorded: %q, %v; want it taken as 0123abcd", id, err)
	}
	if rec, err := Read(ctx, k); err != nil || rec == nil || rec.RedisID != id {
		t.Fatalf("the record after: %+v, %v; want Redis %s", rec, err, id)
	}
}
