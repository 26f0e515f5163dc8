package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/gateway"
)

func (st *stack) addPersister() error {
	r, err := (&consumers.Persister{Redis: st.redis, ClickHouse: st.ch}).Runner(st.base())
	if err != nil {
		return err
	}
	st.parts = append(st.parts, part{name: "persister", run: r.Run, ready: r.CaughtUp})
	return nil
}

func (st *stack) addProjectors() error {
	acks, err := (&consumers.AckProjector{Redis: st.redis, ClickHouse: st.ch}).Runner(st.base())
	if err != nil {
		return err
	}
	members, err := (&consumers.MemberProjector{Redis: st.redis, ClickHouse: st.ch}).Runner(st.base())
	if err != nil {
		return err
	}
	receipts, err := (&consumers.ReceiptProjector{Redis: st.redis, ClickHouse: st.ch}).Runner(st.base())
	if err != nil {
		return err
	}
	notifier := &consumers.ReceiptNotifier{Redis: st.redis, Logger: st.log}
	notes, err := notifier.Runner(st.base())
	if err != nil {
		return err
	}
	st.parts = append(st.parts,
		part{name: "ack-projector", run: acks.Run, ready: acks.CaughtUp},
		part{name: "member-projector", run: members.Run, ready: members.CaughtUp},
		part{name: "receipt-projector", run: receipts.Run, ready: receipts.CaughtUp},
		part{name: "receipt-notifier", run: notes.Run, ready: notes.CaughtUp},
		part{name: "receipt-pushes", run: notifier.Run})
	if st.ch != nil && st.s.EventRetention > 0 {
		st.parts = append(st.parts, part{name: "event-retention", run: st.dropOldEvents})
	}
	return nil
}

func (st *stack) addFanout() error {
	r, err := (&consumers.Fanout{Redis: st.redis, Logger: st.log}).Runner(st.base())
	if err != nil {
		return err
	}
	st.parts = append(st.parts, part{name: "fanout", run: r.Run, ready: r.CaughtUp})
	return nil
}

func (st *stack) addGateway() error {
	secret, admin := st.s.JWTSecret, st.s.AdminToken
	dev := st.role == "dev"
	if dev {
		var err error
		if secret == "" {
			if secret, err = devSecret(st.s.DataDir, "jwt-secret"); err != nil {
				return err
			}
		}
		if admin == "" {
			if admin, err = devSecret(st.s.DataDir, "admin-token"); err != nil {
				return err
			}
			st.log.Info("dev admin token (kept in the data dir)", "token", admin)
		}
	}
	if len(secret) < 32 {
		return errors.New("the gateway needs CHAT_JWT_SECRET (or -jwt-secret) of at least 32 bytes to verify client tokens; make one with openssl rand -hex 32")
	}
	if !dev {
		// docker-compose.yml falls back to published placeholders so that
		// it runs on a laptop as it is; its ports listen on 127.0.0.1
		// only. Anywhere else they let anyone sign tokens or administer.
		for name, v := range map[string]string{"CHAT_JWT_SECRET": secret, "CHAT_ADMIN_TOKEN": admin} {
			if strings.Contains(v, "laptop-only") {
				st.log.Warn(name+" is the placeholder docker-compose.yml publishes: anyone who has read that file can use it. Set your own (e.g. openssl rand -hex 32) before this gateway is reachable from other hosts", "setting", name)
			}
		}
	}
	g, err := gateway.New(gateway.Config{
		Redis: st.redis, Producer: st.prod, History: st.hist,
		Secret: []byte(secret), AdminToken: admin, DevTokens: dev,
		Node: st.s.NodeID, AllowedOrigins: list(st.s.AllowedOrigins), MaxBody: st.s.MaxBody,
		MaxTokenTTL: st.s.MaxTokenTTL, MaxAuthenticating: st.s.MaxAuthing, MaxGroupsPerUser: st.s.MaxGroups, WriteTimeout: st.s.HTTPWriteTimeout,
		MaxCatchingUp: st.s.MaxCatchingUp, Logger: st.log, Metrics: st.metrics,
	})
	if err != nil {
		return err
	}
	st.gateway = g
	st.parts = append(st.parts, part{name: "gateway", ready: g.Ready, run: func(ctx context.Context) error {
		err := g.Run(ctx)
		sctx, cancel := context.WithTimeout(context.Background(), st.s.ShutdownTimeout)
		defer cancel()
		if serr := g.Shutdown(sctx); serr != nil {
			st.log.Warn("connections still open at the shutdown deadline", "err", serr)
		}
		return err
	}})
	return nil
}

func (st *stack) addAll() error {
	for _, add := range []func() error{st.addPersister, st.addProjectors, st.addFanout, st.addGateway} {
		if err := add(); err != nil {
			return err
		}
	}
	return nil
}

// devSecret reads a secret kept in the data dir, making it on first use, so
// dev tokens and the admin token survive restarts.
func devSecret(dir, name string) (string, error) {
	path := filepath.Join(dir, name)
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	}
	buf := make([]byte, 24)
	rand.Read(buf)
	s := hex.EncodeToString(buf)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("data dir: %w", err)
	}
	if err := os.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return s, nil
}

// dropOldEvents drops ack and receipt event months older than the retention,
// at start and then hourly. Receipts are not core data; messages keep theirs.
func (st *stack) dropOldEvents(ctx context.Context) error {
	for {
		dropped, err := st.ch.DropEventsBefore(ctx, time.Now().Add(-st.s.EventRetention))
		switch {
		case err != nil && ctx.Err() == nil:
			st.log.Warn("dropping old event months failed; retrying in an hour", "err", err)
		case len(dropped) > 0:
			st.log.Info("dropped old event months", "partitions", dropped)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Hour):
		}
	}
}
