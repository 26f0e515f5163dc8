package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

const usage = `chatctl operates a chatd deployment.

Usage:
  chatctl topics create|describe|verify
        create the chat.* topics, show them, or check them against the spec
  chatctl groups create GID UID...        a group with its first members (chat.members joins)
  chatctl groups show GID                 a group's members, from chat.members
  chatctl members add GID UID...          join users to a group
  chatctl members remove GID UID...       make users leave a group
  chatctl consumer-groups list [GROUP]    consumer groups, with lag per partition
  chatctl consumer-groups reset GROUP -to earliest|latest|TIME|OFFSET [-topic T] [-partition P] [-dry-run] [-force] [-skip-unread]
        move a stopped group's position (TIME is RFC 3339, e.g. 2024-05-01T12:00:00Z)
  chatctl rebuild acks|receipts|members [-force]
        wipe one Redis projection and replay its topic from the start
  chatctl backfill [-tables messages,acks,receipts,members]
        fill the ClickHouse tables from the topics; running it again changes nothing
  chatctl tail TOPIC [-from beginning|end|OFFSET] [-n N] [-follow] [-partition P]
        decoded records as JSON lines
  chatctl token UID [-ttl 24h]            a client token for a user, signed with CHAT_JWT_SECRET
  chatctl redis adopt [-force]            make the Redis at CHAT_REDIS_ADDRS the deployment's (a move
        to a new Redis); roles on any other are refused from then on
  chatctl help                            this text and every setting

Flags may follow the command or its arguments. Settings shared by every
command are flags or the CHAT_* variables chatd reads:
`

// commands maps "command" or "command sub" to its handler and the flags it
// adds to the shared ones.
var commands = map[string]struct {
	flags func(c *command) any
	run   func(ctx context.Context, c *command, opts any, args []string) error
}{
	"topics create":         {nil, topicsCreate},
	"topics describe":       {nil, topicsDescribe},
	"topics verify":         {nil, topicsVerify},
	"groups create":         {nil, groupsCreate},
	"groups show":           {nil, groupsShow},
	"members add":           {nil, membersAdd},
	"members remove":        {nil, membersRemove},
	"consumer-groups list":  {nil, consumerGroupsList},
	"consumer-groups reset": {resetFlags, consumerGroupsReset},
	"rebuild":               {rebuildFlags, rebuild},
	"backfill":              {backfillFlags, backfill},
	"tail":                  {tailFlags, tail},
	"token":                 {tokenFlags, token},
	"redis adopt":           {adoptFlags, redisAdopt},
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return errors.New("no command given")
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		printUsage(stdout)
		return nil
	}
	if strings.HasPrefix(name, "-") {
		return flagFirst(args)
	}
	args = args[1:]
	if _, ok := commands[name]; !ok && len(args) > 0 {
		name, args = name+" "+args[0], args[1:]
	}
	cmd, ok := commands[name]
	if !ok {
		group, sub, _ := strings.Cut(name, " ")
		var subs []string
		for n := range commands {
			if s, ok := strings.CutPrefix(n, group+" "); ok {
				subs = append(subs, s)
			}
		}
		if len(subs) > 0 && slices.Contains([]string{"-h", "-help", "--help", "help"}, sub) {
			for _, line := range strings.Split(usage, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "chatctl "+group+" ") {
					fmt.Fprintln(stderr, line)
				}
			}
			return nil
		}
		if len(subs) > 0 {
			slices.Sort(subs)
			what := "needs"
			if sub != "" {
				what = fmt.Sprintf("has no %q; it needs", sub)
			}
			return fmt.Errorf("%s %s one of: %s (e.g. chatctl %s %s); see chatctl help", group, what, strings.Join(subs, ", "), group, subs[0])
		}
		printUsage(stderr)
		return fmt.Errorf("unknown command %q; see chatctl help", name)
	}
	c := newCommand(name, getenv, stdout, stderr)
	var opts any
	if cmd.flags != nil {
		opts = cmd.flags(c)
	}
	rest, err := c.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil // asked for: the flags were printed
	}
	if err != nil {
		return err
	}
	return cmd.run(ctx, c, opts, rest)
}

// flagFirst says how to run args, which begin with a flag: with the
// command first. It was taken for the command's name (unknown command
// "-kafka-brokers 127.0.0.1:9092") under the whole usage.
func flagFirst(args []string) error {
	for i, a := range args {
		words := 1
		if _, ok := commands[a]; !ok {
			if i+1 >= len(args) {
				continue
			}
			if _, ok := commands[a+" "+args[i+1]]; !ok {
				continue
			}
			words = 2
		}
		fixed := append(slices.Clone(args[i:i+words]), args[:i]...)
		fixed = append(fixed, args[i+words:]...)
		return fmt.Errorf("%s is a flag, but the command comes first: chatctl %s", args[0], strings.Join(fixed, " "))
	}
	return fmt.Errorf("%s is a flag, but no command comes first: chatctl COMMAND [ARGS] %s; chatctl help lists the commands", args[0], strings.Join(args, " "))
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, usage)
	for _, s := range allSettings {
		def := s.def
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  -%-20s %-26s %s (default %s)\n", s.flag, s.env, s.usage, def)
	}
	fmt.Fprintln(w, "\nSettings of chatctl token only:")
	for _, s := range tokenSettings {
		fmt.Fprintf(w, "  -%-20s %-26s %s\n", s.flag, s.env, s.usage)
	}
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "\nCommands: %s\n", strings.Join(names, ", "))
}

// envNames lists every CHAT_* variable chatctl reads.
func envNames() []string {
	out := make([]string, len(allSettings))
	for i, s := range allSettings {
		out[i] = s.env
	}
	return out
}

// flagNames lists the flags of a command: the shared ones and its own.
func flagNames(name string) ([]string, bool) {
	cmd, ok := commands[name]
	if !ok {
		return nil, false
	}
	c := newCommand(name, func(string) string { return "" }, io.Discard, io.Discard)
	if cmd.flags != nil {
		cmd.flags(c)
	}
	var out []string
	c.fs.VisitAll(func(f *flag.Flag) { out = append(out, f.Name) })
	return out, true
}
