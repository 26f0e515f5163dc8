package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// historyKey says where the deployment keeps the history the window trims.
const historyKey = "chat:history"

// HistoryInClickHouse begins historyKey's value once a role with ClickHouse
// ran: "clickhouse:<database>" (before the database was named, alone).
const HistoryInClickHouse = "clickhouse"

// SetHistoryMode records where this deployment keeps its older history.
func (r *Redis) SetHistoryMode(ctx context.Context, mode string) error {
	if err := r.client.Set(ctx, historyKey, mode, 0).Err(); err != nil {
		return fmt.Errorf("store: record the history mode: %w", err)
	}
	return nil
}

// HistoryMode returns what SetHistoryMode recorded, or "" when nothing was.
func (r *Redis) HistoryMode(ctx context.Context) (string, error) {
	v, err := r.client.Get(ctx, historyKey).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: read the history mode: %w", err)
	}
	return v, nil
}
