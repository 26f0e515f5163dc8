package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/groupchat/chatd/protocol"
)

// Churn (or the end of the run) closes a client while its delivery
// goroutine is handing a message over: with -read, OnMessage then marks it
// read on a client whose Close has begun. That is chatbench's own doing,
// not an error of the server, and must not be counted as one.
func TestMarkingReadOnAClosingClientIsNoError(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "chatd")
	if out, err := exec.Command("go", "build", "-o", bin, "../chatd").CombinedOutput(); err != nil {
		t.Fatalf("go build chatd: %v\n%s", err, out)
	}
	cfg := &Config{Launch: launchConfig{Chatd: bin}, Groups: 1, GroupSize: 2, Read: 1, Quiet: true}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := withDeployment(ctx, cfg, func(d *deployment) error {
		p := newPlan(cfg)
		b := &bench{cfg: cfg, plan: p, dep: d, rec: newRecorder(), byUser: make([]*member, len(p.uids)),
			tokens: make([]string, len(p.uids)), accepted: make([][]sendRef, len(p.gids))}
		a := newAPI(d.URLs[0], d.Admin, cfg.Concurrency)
		if err := b.fetchTokens(ctx, a, p.online); err != nil {
			return err
		}
		if err := setupGroups(ctx, cfg, a, p, b.tokens); err != nil {
			return err
		}
		if err := b.connect(ctx); err != nil {
			return err
		}
		defer b.close()
		sender, reader := b.members[0], b.members[1]
		msgid, err := sender.client().Send(ctx, p.gids[0], b.body(time.Now(), 0))
		if err != nil {
			return err
		}
		// The reader's client is taken by churn and closed while OnMessage
		// hands it the message.
		c := reader.take()
		_ = c.Close()
		b.onMessage(reader, 1, time.Now(), c, protocol.Message{Gid: p.gids[0], MsgID: msgid, Sender: p.uids[sender.user], Body: b.body(time.Now(), 0)})
		if errs := b.rec.errors(); len(errs) != 0 {
			t.Errorf("marking read on a client churn was closing counted as errors: %v", errs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
