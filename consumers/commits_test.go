package consumers

import (
	"log/slog"
	"reflect"
	"testing"
	"time"
)

// A partition that stops commits its position at once (final); the
// pending commit it had queued before must not follow and move the group's
// position back (the fan-out and the receipt notifier keep theirs only in
// Kafka: a position moved back re-pushes what came since).
func TestAFinalCommitIsNotFollowedByAnOlderOne(t *testing.T) {
	var sent []map[int]int64
	c := &groupCommits{topic: "t", interval: time.Hour, log: slog.Default(),
		commit: func(o map[string]map[int]int64) error { sent = append(sent, o["t"]); return nil }}
	c.add(0, 10, false)
	c.add(1, 7, false)
	c.add(0, 20, true) // partition 0 stops
	c.flush()          // the generation's last flush
	c.send(map[int]int64{0: 15, 1: 8})
	want := []map[int]int64{{0: 20}, {1: 7}, {1: 8}}
	if !reflect.DeepEqual(sent, want) {
		t.Fatalf("commits sent %v, want %v: partition 0's position went back after its final commit of 20", sent, want)
	}
}
