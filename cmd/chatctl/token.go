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
	secret string
}

func tokenFlags(c *command) any {
	o := &tokenOpts{}
	c.fs.DurationVar(&o.ttl, "ttl", 24*time.Hour, "how long the token is valid")
	c.fs.StringVar(&o.secret, "jwt-secret", "", "the deployment's token secret (default: $CHAT_JWT_SECRET)")
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
	switch {
	case secret == "":
		return errors.New("no token secret: set CHAT_JWT_SECRET (or -jwt-secret) to the gateways' secret")
	case len(secret) < 32:
		return fmt.Errorf("the token secret is %d bytes; the gateways refuse secrets under 32 bytes, so this is not theirs: check CHAT_JWT_SECRET", len(secret))
	case o.ttl <= 0:
		return fmt.Errorf("-ttl %v: a token must be valid for some time, e.g. -ttl 1h", o.ttl)
	}
	t, err := gateway.IssueToken([]byte(secret), args[0], o.ttl)
	if err != nil {
		return fmt.Errorf("user id %q: %w", args[0], err)
	}
	fmt.Fprintln(c.stdout, t)
	return nil
}
