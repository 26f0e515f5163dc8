package deployment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/groupchat/chatd/store"
)

// ErrNotTheDeploymentsRedis says a role's Redis is not the one the
// deployment's Kafka records.
var ErrNotTheDeploymentsRedis = errors.New("deployment: this Redis is not the deployment's")

// Config of Check.
type Config struct {
	Redis *store.Redis  // required
	Kafka *kafka.Client // required: the deployment's brokers
	// Addrs are the addresses the role reaches Redis at (CHAT_REDIS_ADDRS).
	Addrs []string
	// Own says the Redis is the role's own by construction (chatd dev's
	// embedded one, empty at every start at another address): it is
	// adopted whenever it holds no id.
	Own bool
	// Replicas of chat.deployment when Check makes it (CHAT_REPLICATION_FACTOR).
	Replicas int
	// RecordWait is how long a Redis with an id waits for Kafka's record
	// of it, which a role that claimed it a moment ago is writing.
	// Default 10s.
	RecordWait time.Duration
	Log        *slog.Logger // default slog.Default()
}

// Check makes sure cfg.Redis is the deployment's Redis, claiming it on a
// fresh deployment and giving it its id back after it lost its data (see
// the package doc), and returns the deployment's Redis id. It writes
// nothing to Redis when it refuses: the error wraps
// ErrNotTheDeploymentsRedis and says what to do.
func Check(ctx context.Context, cfg Config) (string, error) {
	if cfg.RecordWait == 0 {
		cfg.RecordWait = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	waitUntil := time.Now().Add(cfg.RecordWait)
	for {
		rec, err := Read(ctx, cfg.Kafka)
		if err != nil {
			return "", err
		}
		id, err := cfg.Redis.Deployment(ctx)
		if err != nil {
			return "", err
		}
		switch {
		case id != "" && rec != nil && id == rec.RedisID:
			if cfg.Own && (!rec.Embedded || !slicesEqual(rec.Addrs, normalAddrs(cfg.Addrs))) {
				return id, Write(ctx, cfg.Kafka, Record{RedisID: id, Addrs: cfg.Addrs, Embedded: true}, cfg.Replicas)
			}
			if !cfg.Own && len(rec.with(cfg.Addrs).Addrs) != len(rec.Addrs) {
				// Another spelling of the same server: learnt, so that
				// it is known again after a loss of data.
				return id, Write(ctx, cfg.Kafka, rec.with(cfg.Addrs), cfg.Replicas)
			}
			return id, nil
		case id != "" && rec != nil:
			return "", fmt.Errorf("%w: the Redis at %s belongs to another deployment (its id %s), while this deployment's Kafka records Redis %s at %s. "+
				"Set CHAT_REDIS_ADDRS to this deployment's Redis (%s); "+
				"to move the deployment to %s for good, stop every role and run `chatctl redis adopt` with CHAT_REDIS_ADDRS=%s (its data is then the deployment's, rebuilt from the topics as needed)",
				ErrNotTheDeploymentsRedis, addrList(cfg.Addrs), id, rec.RedisID, addrList(rec.Addrs), addrList(rec.Addrs), addrList(cfg.Addrs), addrList(cfg.Addrs))
		case id != "": // the record is on its way, or the topic was lost
			if time.Now().Before(waitUntil) {
				if !sleep(ctx, 200*time.Millisecond) {
					return "", ctx.Err()
				}
				continue
			}
			alone, err := cfg.Redis.HoldsDeploymentAlone(ctx)
			if err != nil {
				return "", err
			}
			if alone {
				// A fresh deployment's first role stopped between its
				// claim and the record: nothing used the Redis since.
				if err := Write(ctx, cfg.Kafka, Record{RedisID: id, Addrs: cfg.Addrs, Embedded: cfg.Own}, cfg.Replicas); err != nil {
					return "", err
				}
				cfg.Log.Info("this deployment's Redis, claimed by a role that stopped before recording it, is recorded in Kafka", "redis", addrList(cfg.Addrs), "id", id, "topic", Topic)
				return id, nil
			}
			return "", fmt.Errorf("%w: the Redis at %s belongs to deployment %s, but this deployment's Kafka records no Redis (topic %s is empty or missing). "+
				"If this role's CHAT_KAFKA_BROKERS are right and that Redis is this deployment's (the topic was lost), run `chatctl redis adopt` with CHAT_REDIS_ADDRS=%s; "+
				"otherwise set CHAT_KAFKA_BROKERS to the Kafka of the deployment that Redis serves, or give this deployment a Redis of its own",
				ErrNotTheDeploymentsRedis, addrList(cfg.Addrs), id, Topic, addrList(cfg.Addrs))
		case rec == nil || rec.Embedded && !cfg.Own:
			// A fresh deployment, or one that ran on chatd dev's embedded
			// Redis, gone with its process: this empty Redis takes its place.
			held, err := cfg.Redis.ClaimDeployment(ctx, newID())
			if err != nil {
				return "", err
			}
			if err := Write(ctx, cfg.Kafka, Record{RedisID: held, Addrs: cfg.Addrs, Embedded: cfg.Own}, cfg.Replicas); err != nil {
				return "", err
			}
			cfg.Log.Info("this deployment's Redis is recorded in Kafka", "redis", addrList(cfg.Addrs), "id", held, "topic", Topic)
			return held, nil
		case cfg.Own || rec.names(cfg.Addrs): // the deployment's Redis lost its data
			held, err := cfg.Redis.ClaimDeployment(ctx, rec.RedisID)
			if err != nil {
				return "", err
			}
			if held != rec.RedisID {
				continue // another id came meanwhile: judge it
			}
			if cfg.Own {
				return held, Write(ctx, cfg.Kafka, Record{RedisID: held, Addrs: cfg.Addrs, Embedded: true}, cfg.Replicas)
			}
			cfg.Log.Warn("the deployment's Redis holds no id: it lost its data (a restart without persistence, a flush); giving it its id back, and the consumers rebuild it from the topics",
				"redis", addrList(cfg.Addrs), "id", held)
			return held, nil
		default:
			return "", fmt.Errorf("%w: the Redis at %s holds no deployment id (it is new, or another's), while this deployment's Kafka records Redis %s at %s; "+
				"a role on it would take partitions from the roles on %s and write where no gateway reads. "+
				"Set CHAT_REDIS_ADDRS to this deployment's Redis (%s). "+
				"If that Redis is lost, or the deployment moves to %s for good, stop every role and run `chatctl redis adopt` with CHAT_REDIS_ADDRS=%s, then start them: the consumers rebuild it from the topics",
				ErrNotTheDeploymentsRedis, addrList(cfg.Addrs), rec.RedisID, addrList(rec.Addrs), addrList(rec.Addrs), addrList(rec.Addrs), addrList(cfg.Addrs), addrList(cfg.Addrs))
		}
	}
}

// Adopt makes the Redis cfg names the deployment's, whatever it held and
// Kafka recorded: it gives it a new id and records that with cfg.Addrs
// alone, so that the Redis the deployment used before (which keeps the
// old id) is refused from then on. It returns the id.
func Adopt(ctx context.Context, cfg Config) (string, error) {
	id := newID()
	if err := create(ctx, cfg.Kafka, cfg.Replicas); err != nil {
		return "", err
	}
	if err := cfg.Redis.SetDeployment(ctx, id); err != nil {
		return "", err
	}
	return id, Write(ctx, cfg.Kafka, Record{RedisID: id, Addrs: cfg.Addrs}, cfg.Replicas)
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func addrList(addrs []string) string { return strings.Join(addrs, ",") }

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
