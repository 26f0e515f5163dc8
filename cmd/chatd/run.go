package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
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
		return fmt.Errorf("no role given: run chatd ROLE, the ROLE one of %s (chatd dev runs them all in one process)", strings.Join(roleNames, ", "))
	}
	role := args[0]
	if role == "help" || role == "-h" || role == "--help" || role == "-help" {
		printUsage(os.Stdout)
		return nil
	}
	add, ok := roles[role]
	if !ok {
		printUsage(os.Stderr)
		return unknownRole(args)
	}
	s, err := parseSettings(role, args[1:], getenv, os.Stderr)
	if err != nil {
		return err
	}
	log := s.logger(logw).With("role", role)
	redisLogTo.Store(log)
	// The stores' TLS tells the log of a CA file or client certificate
	// changed in place that does not load: made again with it.
	s.Log = log
	if role != "dev" {
		if s.kafkaSecurity, err = s.KafkaSecurity(); err != nil {
			return err
		}
	}
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

// roleNames are the roles, as the usage lists them.
var roleNames = []string{"dev", "gateway", "fanout", "persister", "projector"}

// unknownRole says what to run instead of args, whose first is no role:
// the command with its role first, when a flag came before it, or the
// role meant. The last line of the usage said only `unknown role
// "-partitions"`, or "projectors".
func unknownRole(args []string) error {
	role := args[0]
	if strings.HasPrefix(role, "-") {
		for i, a := range args {
			if roles[a] != nil {
				fixed := append([]string{a}, slices.Delete(slices.Clone(args), i, i+1)...)
				return fmt.Errorf("%s is a flag, but the role comes first: chatd %s", role, strings.Join(fixed, " "))
			}
		}
		return fmt.Errorf("%s is a flag, but no role comes first: chatd ROLE %s, the ROLE one of %s", role, strings.Join(args, " "), strings.Join(roleNames, ", "))
	}
	meant := ""
	if n := nearest(role, roleNames); n != "" && editDistance(role, n) <= 2 {
		meant = fmt.Sprintf(" (did you mean %s?)", n)
	}
	return fmt.Errorf("unknown role %q%s: want one of %s, e.g. chatd dev", role, meant, strings.Join(roleNames, ", "))
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
