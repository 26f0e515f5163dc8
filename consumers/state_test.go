package consumers

import (
	"testing"
	"time"

	"github.com/groupchat/chatd/schema"
)

// A store whose servers changed between the partition's start and a save
// (Redis back from a snapshot taken at the saved position) holds that
// position without what was handled after it. The save must report the
// state lost, not succeed: the partition replays what the restart rolled
// back.
func TestASaveAfterTheServerChangedReplaysWhatItRolledBack(t *testing.T) {
	k := newKafka(t, 1)
	h := newMemAcks()
	r, _ := runAcksWith(t, k, "acks-rollback-save", h, h, func(c *Config[schema.Ack]) {
		c.CommitInterval = 2 * time.Second
		c.StateCheck = time.Hour // only the save may notice
	})
	sendAcks(t, k, 5)
	waitFor(t, "5 acks handled and saved", 20*time.Second, func() bool { return h.handled() == 5 && h.savedTotal() == 5 })
	restart := h.rdbSave()
	sendAcks(t, k, 5)
	waitFor(t, "10 acks handled", 5*time.Second, func() bool { return h.handled() == 10 })
	if got := h.savedTotal(); got != 5 {
		t.Fatalf("position %d saved before the restart; the test needs the snapshot's 5", got)
	}
	restart()
	waitFor(t, "the acks the restart rolled back handled again", 10*time.Second, func() bool { return h.handled() == 10 && h.savedTotal() == 10 })
	if n := r.Stats().Replays; n != 1 {
		t.Fatalf("%d replays, want 1", n)
	}
}

// The state check notices a change of servers while the partition is idle,
// even though the saved position is the one the runner saved.
func TestTheStateCheckReplaysWhenTheServerChanged(t *testing.T) {
	k := newKafka(t, 1)
	h := newMemAcks()
	r, _ := runAcksWith(t, k, "acks-rollback-check", h, h, func(c *Config[schema.Ack]) {
		c.CommitInterval = time.Hour // no save after the claim: only the check may notice
	})
	waitFor(t, "the partition's start claimed", 20*time.Second, func() bool { return r.CaughtUp() && h.savedTotal() == -2 })
	restart := h.rdbSave()
	sendAcks(t, k, 5)
	waitFor(t, "5 acks handled", 5*time.Second, func() bool { return h.handled() == 5 })
	restart()
	waitFor(t, "the acks the restart rolled back handled again", 10*time.Second, func() bool { return h.handled() == 5 && r.Stats().Replays == 1 })
	if got := h.savedTotal(); got != -2 {
		t.Fatalf("saved position %d, want the snapshot's claim -2: nothing was saved since", got)
	}
}

// A store that could not tell its servers apart when the partition started
// (miniredis: an empty fingerprint) is not checked for the rest of the run:
// what it says later cannot be compared with anything.
func TestAnEmptyFingerprintTurnsTheCheckOff(t *testing.T) {
	k := newKafka(t, 1)
	h := newMemAcks()
	h.server = ""
	r, _ := runAcksWith(t, k, "acks-no-fingerprint", h, h, func(c *Config[schema.Ack]) {
		c.CommitInterval = 5 * time.Millisecond
	})
	sendAcks(t, k, 5)
	waitFor(t, "5 acks handled and saved", 20*time.Second, func() bool { return h.handled() == 5 && h.savedTotal() == 5 })
	h.mu.Lock()
	h.server = "mem-later"
	reads := h.offsetReads
	h.mu.Unlock()
	sendAcks(t, k, 5)
	waitFor(t, "10 acks handled and saved", 20*time.Second, func() bool { return h.handled() == 10 && h.savedTotal() == 10 })
	// Three state checks made after the change. The one partition's
	// watcher reads the positions at the start of each check and again only
	// at the next one; a check that found the state changed has counted the
	// replay before the positions are read again (consumeSaved). So once
	// four reads began after the change, three checks are complete.
	waitFor(t, "three state checks after the change", 20*time.Second, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.offsetReads >= reads+4
	})
	if n := r.Stats().Replays; n != 0 {
		t.Fatalf("%d replays after an empty fingerprint at the start, want 0", n)
	}
}
