package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// plan is who is in which group, who is online and who sends. It is a pure
// function of the Config, so two runs with the same flags have the same
// shape.
type plan struct {
	uids     []string // by user index
	gids     []string // by group index
	members  [][]int  // group -> user indexes
	groupsOf [][]int  // user -> group indexes
	online   []int    // user indexes of the connected users, ascending
	senders  []pair   // (online user, one of its groups), in a shuffled order
}

// pair is an online user and one of its groups: who sends a scheduled
// message where.
type pair struct{ user, group int }

// slot is a member (index into bench.members) and one of its groups.
type slot struct{ member, group int }

func newPlan(cfg *Config) *plan {
	p := &plan{
		uids:     make([]string, cfg.Users),
		gids:     make([]string, cfg.Groups),
		members:  make([][]int, cfg.Groups),
		groupsOf: make([][]int, cfg.Users),
	}
	for u := range p.uids {
		p.uids[u] = fmt.Sprintf("%s-u%d", cfg.Prefix, u)
	}
	for g := range p.gids {
		p.gids[g] = fmt.Sprintf("%s-g%d", cfg.Prefix, g)
		for j := 0; j < cfg.GroupSize; j++ {
			u := (g*cfg.GroupSize + j) % cfg.Users
			p.members[g] = append(p.members[g], u)
			p.groupsOf[u] = append(p.groupsOf[u], g)
		}
	}
	// Online users are picked by the golden-ratio sequence, which spreads
	// any fraction evenly over consecutive indexes, so over the groups.
	for u := range p.uids {
		if len(p.groupsOf[u]) == 0 {
			continue // in no group: nothing to receive
		}
		if _, frac := math.Modf(float64(u) * 0.6180339887498949); frac < cfg.Online || cfg.Online >= 1 {
			p.online = append(p.online, u)
		}
	}
	for _, u := range p.online {
		for _, g := range p.groupsOf[u] {
			p.senders = append(p.senders, pair{u, g})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(p.senders), func(i, j int) { p.senders[i], p.senders[j] = p.senders[j], p.senders[i] })
	return p
}

// onlineIn counts the online members of group g.
func (p *plan) onlineIn(isOnline []bool, g int) int {
	n := 0
	for _, u := range p.members[g] {
		if isOnline[u] {
			n++
		}
	}
	return n
}

// setupGroups creates the groups, then waits until every online user's
// sync lists all its groups: the member projector has applied the joins,
// so the clients' login sync starts each group at the member's cursor.
func setupGroups(ctx context.Context, cfg *Config, a *api, p *plan, tokens []string) error {
	err := parallel(ctx, len(p.gids), cfg.Concurrency, func(ctx context.Context, g int) error {
		uids := make([]string, len(p.members[g]))
		for i, u := range p.members[g] {
			uids[i] = p.uids[u]
		}
		return a.createGroup(ctx, p.gids[g], uids)
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	return parallel(ctx, len(p.online), cfg.Concurrency, func(ctx context.Context, i int) error {
		u := p.online[i]
		for {
			have, err := a.syncGids(ctx, tokens[u])
			if err != nil {
				return fmt.Errorf("sync of %s: %w", p.uids[u], err)
			}
			missing := 0
			for _, g := range p.groupsOf[u] {
				if !have[p.gids[g]] {
					missing++
				}
			}
			if missing == 0 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %d of its groups still missing from sync after 60 s; is the member projector running?", p.uids[u], missing)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}
