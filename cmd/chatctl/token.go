package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/groupchat/chatd/gateway"
)

type tokenOpts struct {
	ttl    time.Duration
	maxTTL string
	secret string
}

// tokenSettings are the settings of chatctl token that the others do not
// read, as chatctl help lists them.
var tokenSettings = []struct{ flag, env, usage string }{
	{"jwt-secret", "CHAT_JWT_SECRET", "the deployment's token secret, the gateways' (default: $CHAT_JWT_SECRET)"},
	{"max-ttl", "CHAT_MAX_TOKEN_TTL", "the longest -ttl the gateways take (default: $CHAT_MAX_TOKEN_TTL, else 720h)"},
}

func tokenFlags(c *command) any {
	o := &tokenOpts{}
	c.fs.DurationVar(&o.ttl, "ttl", 24*time.Hour, "how long the token is valid")
	c.fs.StringVar(&o.secret, tokenSettings[0].flag, "", tokenSettings[0].usage)
	c.fs.StringVar(&o.maxTTL, tokenSettings[1].flag, "", tokenSettings[1].usage)
	return o
}

// token prints a client token for a user, signed with the secret the
// gateways check (what an application's login service does in production;
// `chatd dev` serves /dev/token instead).
func token(_ context.Context, c *command, opts any, args []string) error {
	o := opts.(*tokenOpts)
	if len(args) != 1 {
		return errors.New("usage: chatctl token UID [-ttl 24h] (the secret from CHAT_JWT_SECRET or -jwt-secret)")
	}
	secret := o.secret
	if secret == "" {
		secret = c.getenv("CHAT_JWT_SECRET")
	}
	maxTTL, err := tokenMaxTTL(o.maxTTL, c.getenv("CHAT_MAX_TOKEN_TTL"))
	if err != nil {
		return err
	}
	switch {
	case secret == "":
		return errors.New("no token secret: set CHAT_JWT_SECRET (or -jwt-secret) to the gateways' secret; chatd dev keeps its own in its data dir: CHAT_JWT_SECRET=$(cat data/jwt-secret)")
	case len(secret) < 32:
		return fmt.Errorf("the token secret is %d bytes; the gateways refuse secrets under 32 bytes, so this is not theirs: check CHAT_JWT_SECRET", len(secret))
	case o.ttl <= 0:
		return fmt.Errorf("-ttl %v: a token must be valid for some time, e.g. -ttl 1h", o.ttl)
	case o.ttl > maxTTL:
		return fmt.Errorf("-ttl %v is past the %v the gateways take (CHAT_MAX_TOKEN_TTL): they would refuse the token as bad_token; give a shorter -ttl, or raise CHAT_MAX_TOKEN_TTL on every gateway first", o.ttl, maxTTL)
	}
	t, err := gateway.IssueToken([]byte(secret), args[0], o.ttl)
	if err != nil {
		return fmt.Errorf("user id %q: %w", args[0], err)
	}
	fmt.Fprintln(c.stdout, t)
	return nil
}

// tokenMaxTTL is the gateways' cap on a token's life: the -max-ttl flag,
// else CHAT_MAX_TOKEN_TTL, else their default.
func tokenMaxTTL(flag, env string) (time.Duration, error) {
	v, name := flag, "-max-ttl"
	if v == "" {
		v, name = env, "CHAT_MAX_TOKEN_TTL"
	}
	if v == "" {
		return gateway.DefaultMaxTokenTTL, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 720h, the gateways' CHAT_MAX_TOKEN_TTL", name, v)
	}
	return d, nil
}
