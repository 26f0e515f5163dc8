package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// deploymentKey holds the identity of the deployment this Redis serves
// (see package deployment): the id the first role of the deployment
// minted, or the one an operator adopted the server under.
const deploymentKey = "chat:deployment"

// Deployment returns the id of the deployment this Redis serves, or ""
// when it holds none (a Redis never used by chatd, one that lost its data,
// or one used before the id was kept).
func (r *Redis) Deployment(ctx context.Context) (string, error) {
	v, err := r.client.Get(ctx, deploymentKey).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: read the deployment's id: %w", err)
	}
	return v, nil
}

// ClaimDeployment records id as the deployment this Redis serves unless
// one is recorded already (SET NX), and returns the one it holds after:
// id, or the one another role recorded first.
func (r *Redis) ClaimDeployment(ctx context.Context, id string) (string, error) {
	if err := r.client.SetNX(ctx, deploymentKey, id, 0).Err(); err != nil {
		return "", fmt.Errorf("store: record the deployment's id: %w", err)
	}
	return r.Deployment(ctx)
}

// SetDeployment records id as the deployment this Redis serves, over any
// other: an operator adopting the server (chatctl redis adopt).
func (r *Redis) SetDeployment(ctx context.Context, id string) error {
	if err := r.client.Set(ctx, deploymentKey, id, 0).Err(); err != nil {
		return fmt.Errorf("store: record the deployment's id: %w", err)
	}
	return nil
}

// HoldsDeploymentAlone reports whether the deployment's id is all this
// Redis holds: claimed by a role that stopped before it could record the
// claim in Kafka, and never used since.
func (r *Redis) HoldsDeploymentAlone(ctx context.Context) (bool, error) {
	n, err := r.client.DBSize(ctx).Result()
	if err != nil {
		return false, fmt.Errorf("store: count the keys: %w", err)
	}
	return n == 1, nil
}
