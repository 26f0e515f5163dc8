package gateway

import (
	"context"
	"maps"
	"runtime"

	"github.com/redis/go-redis/v9"

	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/store"
)

// A sync reads the cursors of every group of the user: a script a group
// in Redis, 9-12 us of its CPU each, and a pipeline of them held one
// connection of the Redis client's pool until its last reply. A login
// storm of users in a thousand groups each (200 users: 2-2.8 s of Redis
// CPU) so held every connection of the pool: the presence refreshes,
// sends and acks waited behind the syncs, failed past the pool's timeout
// (4 s), and a presence refresh that failed long enough had every
// connection told to sync again, a second storm. So a sync reads its
// cursors syncChunk groups a round trip, each round trip in one of this
// gateway's slots for sync reads, half the pool's connections: the syncs
// of a storm wait for a slot in the gateway, in turn, and leave the rest
// of the pool to everything else.

// syncChunk is how many groups' cursors one round trip of a sync reads.
const syncChunk = 1000

// syncReadSlots is how many reads of syncs' cursors run at once: half the
// connections of the client's pool (of each node's, on a cluster), at
// least one.
func syncReadSlots(c redis.UniversalClient) int {
	pool := 10 * runtime.GOMAXPROCS(0) // go-redis's default
	switch c := c.(type) {
	case *redis.Client:
		pool = c.Options().PoolSize
	case *redis.ClusterClient:
		pool = c.Options().PoolSize
	}
	return max(1, pool/2)
}

// memberCursors returns uid's cursors in gids, syncChunk groups a round
// trip, each in a slot of syncReads.
func (g *Gateway) memberCursors(ctx context.Context, uid string, gids []string) (map[string]store.MemberCursors, error) {
	out := make(map[string]store.MemberCursors, len(gids))
	for lo := 0; lo < len(gids); lo += syncChunk {
		select {
		case g.syncReads <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		cur, err := g.cfg.Redis.MemberCursors(ctx, uid, gids[lo:min(lo+syncChunk, len(gids))])
		<-g.syncReads
		if err != nil {
			return nil, err
		}
		maps.Copy(out, cur)
	}
	return out, nil
}

// syncFrames is what a sync answer costs beyond the frame that asked: one
// frame per protocol.SyncPer groups it lists.
func syncFrames(s *protocol.Synced) int { return protocol.SyncFrames(len(s.Groups)) }
