package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Fingerprint names the Redis server(s) the store writes to: the run_id
// (INFO server) of the one server, or of every master of a cluster, sorted
// and joined by commas. A run_id is new on every start of redis-server and
// differs between a master and its replicas, so the fingerprint changes
// when Redis restarts (from an older snapshot, say) or fails over to a
// replica: a consumer that saves its position here compares the fingerprint
// taken when it began with the one before each save, and replays when they
// differ, because the server it saves to may lack effects made after the
// position it holds (see AdvanceOffset).
//
// A server that answers INFO server with an error or without a run_id
// (miniredis, which the embedded mode uses) gives "": the caller cannot
// tell restarts apart, and an embedded Redis cannot restart without losing
// everything anyway, which the saved position vanishing already tells.
func (r *Redis) Fingerprint(ctx context.Context) (string, error) {
	c, ok := r.client.(*redis.ClusterClient)
	if !ok {
		return runID(ctx, r.client)
	}
	var (
		mu  sync.Mutex
		ids []string
	)
	err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		id, err := runID(ctx, m)
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
		return err
	})
	if err != nil {
		return "", err
	}
	slices.Sort(ids)
	if slices.Contains(ids, "") {
		return "", nil
	}
	return strings.Join(ids, ","), nil
}

// runID returns the run_id in c's INFO server; "" when the server has none
// to tell.
func runID(ctx context.Context, c redis.Cmdable) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	var reply redis.Error
	if errors.As(err, &reply) && !isTransient(err) {
		return "", nil // the server does not tell (miniredis: unsupported section)
	}
	if err != nil {
		return "", fmt.Errorf("store: redis INFO server: %w", err)
	}
	return parseRunID(info), nil
}

// isTransient tells error replies that a real server gives while it cannot
// serve yet from a refusal to say who it is.
func isTransient(err error) bool {
	msg := err.Error()
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// parseRunID finds the run_id field of an INFO reply; "" when there is none.
func parseRunID(info string) string {
	for line := range strings.Lines(info) {
		if id, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(id)
		}
	}
	return ""
}
