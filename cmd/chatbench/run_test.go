package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestLoadAgainstChatd builds chatd, lets chatbench start it on a real
// redis-server with a second gateway, and runs a small load with read
// receipts, churn and offline members: every member, online or not, must
// get every message once, and the report must hold what the run did.
func TestLoadAgainstChatd(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "chatd")
	if out, err := exec.Command("go", "build", "-o", bin, "../chatd").CombinedOutput(); err != nil {
		t.Fatalf("go build chatd: %v\n%s", err, out)
	}
	cfg := &Config{
		Launch: launchConfig{Chatd: bin, Redis: true, Gateways: 2},
		Groups: 3, GroupSize: 8, Online: 0.5, Rate: 20, Warmup: time.Second, Duration: 4 * time.Second,
		Drain: 30 * time.Second, Read: 1, Churn: 2, ChurnOffline: 500 * time.Millisecond, OfflineCheck: -1, Quiet: true,
	}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var res *result
	err := withDeployment(ctx, cfg, func(d *deployment) error {
		if len(d.URLs) != 2 || d.Kafka == "" || len(d.Procs) != 3 {
			t.Errorf("deployment: gateways %v, Kafka %q, processes %v; want 2 gateways, a broker, chatd + redis-server + a gateway", d.URLs, d.Kafka, d.Procs)
		}
		var err error
		res, err = runLoad(ctx, cfg, d)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.ok() {
		t.Fatalf("loss check: online %+v, offline %+v", res.Loss, res.Offline.Loss)
	}
	if res.Offline == nil || res.Offline.Checked == 0 || res.Offline.Loss.Expected == 0 {
		t.Fatalf("offline members not checked: %+v", res.Offline)
	}
	if res.Sends.Accepted != res.Sends.Scheduled || res.Sends.Accepted < 90 || res.EndToEnd.Count == 0 {
		t.Errorf("sends %+v, %d measured deliveries; want ~100 accepted, all of them, and latencies", res.Sends, res.EndToEnd.Count)
	}
	if r := res.Records; !r.Known || r.Messages != res.Sends.Accepted || r.Acks == 0 || r.Receipts == 0 {
		t.Errorf("records %+v; want the accepted messages, acks and receipts counted from the broker", r)
	}
	if res.Receipts.ReadMarks == 0 || res.SDK.Reads == 0 {
		t.Errorf("receipts %+v, read frames %d; want read marks sent", res.Receipts, res.SDK.Reads)
	}
	if res.Churn.Out == 0 || res.Churn.In != res.Churn.Out {
		t.Errorf("churn %+v; want disconnects, each back", res.Churn)
	}
	if len(res.Errors) != 0 {
		t.Errorf("errors %v", res.Errors)
	}
	if res.CPU.ByProcess["chatd"] <= 0 || res.CPU.ByProcess["redis-server"] <= 0 {
		t.Errorf("cpu %+v; want chatd's and redis-server's", res.CPU)
	}
}
