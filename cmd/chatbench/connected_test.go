package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// withConnectedBench builds chatd, starts a deployment of it for cfg (its
// Launch.Chatd is set here), creates the plan's groups and connects the
// online members, then runs fn with the bench and its plan; it fails t on
// any error.
func withConnectedBench(t *testing.T, cfg *Config, fn func(ctx context.Context, b *bench, p *plan) error) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chatd")
	if out, err := exec.Command("go", "build", "-o", bin, "../chatd").CombinedOutput(); err != nil {
		t.Fatalf("go build chatd: %v\n%s", err, out)
	}
	cfg.Launch.Chatd = bin
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := withDeployment(ctx, cfg, func(d *deployment) error {
		p := newPlan(cfg)
		b := newBench(cfg, p, d)
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
		return fn(ctx, b, p)
	})
	if err != nil {
		t.Fatal(err)
	}
}
