package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/groupchat/chatd/internal/deployment"
)

type adoptOpts struct{ force bool }

func adoptFlags(c *command) any {
	o := &adoptOpts{}
	c.fs.BoolVar(&o.force, "force", false, "adopt although chatd's consumer groups have members (roles still running on the Redis the deployment used)")
	return o
}

// redisAdopt makes the Redis at CHAT_REDIS_ADDRS the deployment's: the
// roles refuse any other from then on, the one used before included.
func redisAdopt(ctx context.Context, c *command, opts any, args []string) error {
	o := opts.(*adoptOpts)
	if len(args) > 0 {
		return fmt.Errorf("redis adopt takes no arguments (the Redis is CHAT_REDIS_ADDRS), got %q", strings.Join(args, " "))
	}
	brokers, err := c.s.brokers()
	if err != nil {
		return err
	}
	a := newAdmin(brokers, c.s.kafkaSecurity)
	defer a.close()
	// Roles still on the Redis used before would go on writing there,
	// beside those started on this one.
	groups := slices.Sorted(maps.Keys(knownGroups))
	for _, g := range groups {
		if err := checkInactive(ctx, a, g, o.force); err != nil {
			return fmt.Errorf("%w (or -force, if they run on this Redis already)", err)
		}
	}
	r, done, err := c.s.redis(ctx)
	if err != nil {
		return err
	}
	defer done()
	before, err := deployment.Read(ctx, a.client)
	if err != nil {
		fmt.Fprintf(c.stderr, "the record of the deployment's Redis does not read (%v); writing a new one\n", err)
	}
	addrs := list(c.s.RedisAddrs)
	id, err := deployment.Adopt(ctx, deployment.Config{Redis: r, Kafka: a.client, Addrs: addrs, Replicas: c.s.Replicas})
	if err != nil {
		return err
	}
	if before != nil {
		fmt.Fprintf(c.stdout, "the deployment's Redis was %s at %s\n", before.RedisID, strings.Join(before.Addrs, ","))
	}
	fmt.Fprintf(c.stdout, "the deployment's Redis is now %s at %s; roles on any other Redis are refused at start\n", id, strings.Join(addrs, ","))
	fmt.Fprintln(c.stdout, "start the roles with this CHAT_REDIS_ADDRS: the persister and the projectors rebuild what it lacks from the topics")
	return nil
}
