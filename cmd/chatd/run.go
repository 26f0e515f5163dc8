package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

const usage = `chatd runs the group-chat delivery backend.

Usage:
  chatd dev         everything in one process on the embedded default:
                    embedded Kafka (data in ./data), embedded Redis,
                    ClickHouse when CHAT_CLICKHOUSE_ADDRS is set
  chatd gateway     WebSocket and HTTP API for clients (behind a load balancer)
  chatd fanout      chat.messages to the gateways of online members
  chatd persister   chat.messages into ClickHouse and the Redis window
  chatd projector   chat.acks, chat.receipts, chat.members into cursors and membership
  chatd help        this text and every setting

Each setting is a flag after the role or a CHAT_* variable:
`

// roles maps a role to the parts it runs.
var roles = map[string]func(*stack) error{
	"dev":       func(st *stack) error { return st.addAll() },
	"gateway":   func(st *stack) error { return st.addGateway() },
	"fanout":    func(st *stack) error { return st.addFanout() },
	"persister": func(st *stack) error { return st.addPersister() },
	"projector": func(st *stack) error { return st.addProjectors() },
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	return runTo(ctx, args, getenv, os.Stderr)
}

// runTo is run with the log written to logw.
func runTo(ctx context.Context, args []string, getenv func(string) string, logw io.Writer) error {
	if len(args) == 0 {
		printUsage(os.Stderr)
		return errors.New("no role given")
	}
	role := args[0]
	if role == "help" || role == "-h" || role == "--help" || role == "-help" {
		printUsage(os.Stdout)
		return nil
	}
	add, ok := roles[role]
	if !ok {
		printUsage(os.Stderr)
		return fmt.Errorf("unknown role %q", role)
	}
	s, err := parseSettings(role, args[1:], getenv, os.Stderr)
	if err != nil {
		return err
	}
	log := s.logger(logw).With("role", role)
	redisLogTo.Store(log)
	st, err := openStack(ctx, role, s, log)
	if err != nil {
		return err
	}
	defer st.close()
	if err := add(st); err != nil {
		return err
	}
	return st.run(ctx)
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, usage)
	names := make([]string, 0, len(allSettings))
	byName := map[string]setting{}
	for _, s := range allSettings {
		names = append(names, s.flag)
		byName[s.flag] = s
	}
	sort.Strings(names)
	for _, n := range names {
		s := byName[n]
		def := s.def
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  -%-20s %-26s %s (default %s%s)\n", n, s.env, s.usage, def, rolesNote(s.roles))
	}
}

func rolesNote(r string) string {
	switch r {
	case "dev":
		return "; dev only"
	case "prod":
		return "; production roles"
	}
	return ""
}

// envNames lists every CHAT_* variable chatd reads.
func envNames() []string {
	out := make([]string, len(allSettings))
	for i, s := range allSettings {
		out[i] = s.env
	}
	return out
}
