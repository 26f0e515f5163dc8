package main

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/groupchat/chatd/topics"
)

func topicsCreate(ctx context.Context, c *command, _ any, args []string) error {
	if err := noArgs(c, args); err != nil {
		return err
	}
	cfg, err := c.s.topicsConfig()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(c.stderr, nil))
	if err := topics.Ensure(ctx, cfg, log); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "topics ready: %d partitions each\n", cfg.Partitions)
	return nil
}

func topicsDescribe(ctx context.Context, c *command, _ any, args []string) error {
	if err := noArgs(c, args); err != nil {
		return err
	}
	specs, states, err := describe(ctx, c)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tEXISTS\tPARTITIONS\tREPLICAS\tCONFIGS")
	for i, s := range specs {
		st := states[i]
		keys := make([]string, 0, len(st.Configs))
		for k := range st.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var cfgs []string
		for _, k := range keys {
			cfgs = append(cfgs, k+"="+st.Configs[k])
		}
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%s\n", s.Name, st.Exists, st.Partitions, st.ReplicationFactor, strings.Join(cfgs, " "))
	}
	return tw.Flush()
}

func topicsVerify(ctx context.Context, c *command, _ any, args []string) error {
	if err := noArgs(c, args); err != nil {
		return err
	}
	cfg, err := c.s.topicsConfig()
	if err != nil {
		return err
	}
	problems, err := topics.Check(ctx, cfg)
	if err != nil {
		return err
	}
	if len(problems) == 0 {
		fmt.Fprintf(c.stdout, "ok: %d topics match the spec (%d partitions each)\n", len(topics.Specs(cfg)), c.s.Partitions)
		return nil
	}
	fatal := 0
	for _, p := range problems {
		kind := "warning"
		if p.Fatal {
			kind, fatal = "ERROR", fatal+1
		}
		fmt.Fprintf(c.stdout, "%s: %s\n", kind, p)
	}
	if fatal > 0 {
		return fmt.Errorf("%d of the topics' differences from the spec cannot be fixed in place; see above", fatal)
	}
	return fmt.Errorf("%d settings differ from the spec (warnings above): change the topics with kafka-configs, or the settings the warnings name", len(problems))
}

func describe(ctx context.Context, c *command) ([]topics.Spec, []topics.State, error) {
	cfg, err := c.s.topicsConfig()
	if err != nil {
		return nil, nil, err
	}
	specs := topics.Specs(cfg)
	client, closeClient := topics.NewClient(cfg.Brokers, cfg.Security, 15*time.Second)
	defer closeClient()
	states, err := topics.Describe(ctx, client, specs)
	return specs, states, err
}

func noArgs(c *command, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("chatctl %s takes no arguments, got %q", c.name, args)
	}
	return nil
}
