package consumers

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// How a runner with an OffsetStore notices that the state next to its
// saved position no longer holds what it wrote:
//
//   - the position vanished or moved (Redis restarted empty, was flushed, or
//     another consumer saved it): AdvanceOffset's compare-and-set fails,
//     and watchSaved sees it while the partition is idle;
//   - the server changed (Redis restarted from an older snapshot, or failed
//     over to a replica that lagged): the position may be the very one the
//     runner saved last while the effects made after it are gone. The
//     store's fingerprint (the servers' run_ids) taken when the partition
//     started differs from the one read before each save and at each state
//     check.
//
// Either way the partition replays from the position saved now; effects
// are idempotent, so what is applied twice does no harm.

// lostPos marks, in consume's saved position, that the position moved
// under the runner.
const lostPos = -100

// savedPos is the position a runner saved for a partition: the last save
// the store answered, and the last one asked for, which is in the store
// before its answer is back; and the fingerprint of the store's servers
// when the partition started.
type savedPos struct {
	atomic.Int64              // the last save answered
	asked        atomic.Int64 // the last save asked for
	server       string       // the OffsetStore's Fingerprint; "": unknown, not checked
}

// fingerprint reads the store's fingerprint into saved.server, retrying
// until it can or ctx ends. Read before the partition writes anything, so
// that every effect of this run is on the server(s) it names, or the
// fingerprint has changed by the next save.
func (r *Runner[E]) fingerprint(ctx context.Context, log *slog.Logger, saved *savedPos) bool {
	for attempt := 0; ; attempt++ {
		fp, err := r.cfg.Offsets.Fingerprint(ctx)
		if err == nil {
			saved.server = fp
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("reading which Redis server holds the state failed; retrying", "err", err)
		if !sleep(ctx, r.backoff(attempt)) {
			return false
		}
	}
}

// serverChanged reports whether the store's servers are no longer those the
// partition started on, so that the state may lack effects made after the
// saved position. An empty fingerprint at the start turns the check off
// (miniredis, which cannot restart without losing everything anyway, and
// which the vanished position then tells).
func (r *Runner[E]) serverChanged(ctx context.Context, log *slog.Logger, saved *savedPos) (bool, error) {
	if saved.server == "" {
		return false, nil
	}
	fp, err := r.cfg.Offsets.Fingerprint(ctx)
	if err != nil || fp == saved.server {
		return false, err
	}
	log.Warn("Redis restarted or failed over (its run_id changed): it may have come back from a snapshot older than the effects made since the saved position; replaying from what is saved",
		"was", saved.server, "now", fp)
	return true, nil
}

// watchSaved checks every StateCheck that the partition's saved position is
// still one consume saved, on the servers it started on; when it is not
// (the state was wiped, or rolled back, while the partition was idle), it
// sets gone and cancels consume.
func (r *Runner[E]) watchSaved(ctx context.Context, log *slog.Logger, part int, saved *savedPos, gone *atomic.Bool, cancel context.CancelFunc) {
	t := time.NewTicker(r.cfg.StateCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		before, asked := saved.Load(), saved.asked.Load()
		if before == lostPos {
			continue // a save found it lost: consume is replaying
		}
		stored, err := r.cfg.Offsets.Offsets(ctx, r.cfg.Group, r.cfg.Topic)
		if err != nil {
			continue // the store is down: the next commit or check tells
		}
		at, ok := stored[part]
		if !ok {
			at = -1
		}
		// A save may be asked for or answered between the loads: the
		// position is one of consume's if it is any of them (a save is in
		// the store before its answer is back).
		if at == before || at == asked || at == saved.Load() || at == saved.asked.Load() {
			if changed, err := r.serverChanged(ctx, log, saved); err != nil || !changed {
				continue
			}
		}
		gone.Store(true)
		cancel()
		return
	}
}
