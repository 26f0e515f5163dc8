package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/groupchat/chatd/consumers"
	"github.com/groupchat/chatd/protocol"
	"github.com/groupchat/chatd/topics"
)

// Config of a run. Zero fields take the defaults written beside them.
type Config struct {
	Dir              string        // where the servers keep their data and logs; default a new temporary directory
	Duration         time.Duration // load with faults; default 2m. The run takes about a minute more (start, drain, verdict)
	Seed             uint64        // fault schedule and world; default from the clock
	Users            int           // default 12
	Groups           int           // default 6
	GroupSize        int           // default 5
	MultiDevice      int           // users with two devices; default 3
	SendEvery        time.Duration // mean pause between one online device's sends; default 1s
	Partitions       int           // of the chat.* topics; default 4
	Window           int           // CHAT_WINDOW_SIZE; default 1000
	ClickHouseOutage time.Duration // how long ClickHouse is stopped; default 30s
	Out              io.Writer     // progress and the timeline as it happens; default none
}

func (c *Config) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Users, 12)
	def(&c.Groups, 6)
	def(&c.GroupSize, 5)
	def(&c.MultiDevice, 3)
	def(&c.Partitions, 4)
	def(&c.Window, 1000)
	if c.Duration == 0 {
		c.Duration = 2 * time.Minute
	}
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	if c.SendEvery == 0 {
		c.SendEvery = time.Second
	}
	if c.ClickHouseOutage == 0 {
		c.ClickHouseOutage = 30 * time.Second
	}
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Duration < 60*time.Second:
		return fmt.Errorf("chaos: duration %v: at least 1m, so that every fault kind fits", c.Duration)
	case c.ClickHouseOutage > c.Duration/2:
		return fmt.Errorf("chaos: a ClickHouse outage of %v does not fit a run of %v", c.ClickHouseOutage, c.Duration)
	case c.GroupSize < 2 || c.GroupSize > c.Users:
		return fmt.Errorf("chaos: group size %d: want 2 to the number of users (%d)", c.GroupSize, c.Users)
	case c.MultiDevice < 0 || c.MultiDevice > c.Users:
		return fmt.Errorf("chaos: %d users with two devices, of %d", c.MultiDevice, c.Users)
	case c.Groups < 1 || c.Partitions < 1 || c.Window < 1 || c.SendEvery < 10*time.Millisecond:
		return errors.New("chaos: groups, partitions and window must be positive, sends at most 100/s per device")
	}
	return nil
}

// harness is one run.
type harness struct {
	cfg          Config
	c            *cluster
	w            *world
	rec          *recorder
	tl           *timeline
	watch        *cursorWatch
	devices      []*device
	gatewayHosts []string

	poisonMu sync.Mutex
	poisoned []poisonRec

	chDown, redisDown sync.Mutex // held while the server is down by a fault

	refusedMu   sync.Mutex
	refusedBy   map[string]int       // sends the server refused for good, by error code
	refusedNote map[string]time.Time // when each code was last put on the timeline
}

// refused counts a send the server refused for good, and notes the first
// of each code on the timeline (again after 10 s).
func (h *harness) refused(code protocol.Code, what string) {
	h.refusedMu.Lock()
	defer h.refusedMu.Unlock()
	if h.refusedBy == nil {
		h.refusedBy, h.refusedNote = map[string]int{}, map[string]time.Time{}
	}
	h.refusedBy[string(code)]++
	if time.Since(h.refusedNote[string(code)]) > 10*time.Second {
		h.refusedNote[string(code)] = time.Now()
		h.tl.note(what)
	}
}

// Run starts the system in cfg.Dir, runs the load with faults for
// cfg.Duration, brings everything back, and checks the invariants. An error
// means the run could not be made (a server did not start); a run that was
// made returns its Result, whose OK says whether every invariant held.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "chatchaos-")
		if err != nil {
			return nil, err
		}
		cfg.Dir = d
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	tl := &timeline{out: cfg.Out}
	tl.note(fmt.Sprintf("run in %s, seed %d, load %v", cfg.Dir, cfg.Seed, cfg.Duration))
	c, err := startCluster(ctx, cfg.Dir, cfg.Partitions, cfg.Window, tl)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	h := &harness{cfg: cfg, c: c, tl: tl, w: newWorld(rng, cfg.Users, cfg.Groups, cfg.GroupSize)}
	for _, g := range c.gateways {
		h.gatewayHosts = append(h.gatewayHosts, strings.TrimPrefix(g, "http://"))
	}
	if err := h.w.create(ctx, c); err != nil {
		return nil, err
	}
	h.rec = newRecorder(h.w)
	for i, u := range h.w.users {
		n := 1
		if i < cfg.MultiDevice {
			n = 2
		}
		for k := range n {
			h.devices = append(h.devices, &device{h: h, name: fmt.Sprintf("%s.%d", u, k), uid: u, gids: h.w.groupsOf[u], wake: make(chan struct{}, 1)})
		}
	}
	h.watch = newCursorWatch(h)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); h.watch.run(watchCtx, 50*time.Millisecond) }()
	defer func() { stopWatch(); <-watchDone }()

	start := time.Now()
	tl.note(fmt.Sprintf("load starts: %d devices of %d users in %d groups", len(h.devices), len(h.w.users), len(h.w.gids)))
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.Duration)
	defer stopLoad()
	var devWG sync.WaitGroup
	for _, d := range h.devices {
		devWG.Add(1)
		go func() { defer devWG.Done(); d.run(loadCtx) }()
	}
	faultsDone := make(chan struct{})
	plan := schedule(rng, min(10*time.Second, cfg.Duration/10), cfg.Duration-15*time.Second-cfg.ClickHouseOutage/2)
	go func() { defer close(faultsDone); h.runFaults(loadCtx, start, plan) }()
	go h.progress(loadCtx)
	<-loadCtx.Done()
	devWG.Wait()
	<-faultsDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	tl.note("load over; bringing everything back and draining")
	res := h.finish(ctx, start)
	return res, nil
}

// progress prints a line every 10 s.
func (h *harness) progress(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sends := h.rec.allSends()
		acc := 0
		for _, s := range sends {
			if s.MsgID >= 0 {
				acc++
			}
		}
		var delivered int
		online := 0
		for _, d := range h.devices {
			d.mu.Lock()
			delivered += len(d.log)
			d.mu.Unlock()
			if d.online.Load() {
				online++
			}
		}
		h.tl.note(fmt.Sprintf("progress: %d sends, %d accepted, %d deliveries, %d of %d devices online, %d faults", len(sends), acc, delivered, online, len(h.devices), len(h.tl.faults())))
	}
}

// finish waits for the system to be whole again, lets every device catch
// up and close, and judges.
func (h *harness) finish(ctx context.Context, start time.Time) *Result {
	var setup []string
	fail := func(what string, err error) {
		setup = append(setup, fmt.Sprintf("%s: %v", what, err))
		h.tl.note(fmt.Sprintf("%s: %v", what, err))
	}
	if err := h.c.allUp(ctx, 3*time.Minute); err != nil {
		fail("recovery", err)
	}
	if err := h.c.waitCaughtUp(ctx, consumers.GroupPersister, topics.Messages, 3*time.Minute); err != nil {
		fail("drain", err)
	}
	truth, err := queryMessages(ctx, h.c)
	if err != nil {
		fail("ClickHouse messages", err)
	}
	heads := map[string]int64{}
	for gid, ms := range truth.byGid {
		if len(ms) > 0 {
			heads[gid] = ms[len(ms)-1]
		}
	}
	h.finalReads(ctx)
	if err := h.finalSessions(ctx, heads); err != nil {
		fail("final pulls", err)
	}
	for _, t := range [][2]string{{consumers.GroupAckProjector, topics.Acks}, {consumers.GroupReceiptProjector, topics.Receipts}} {
		if err := h.c.waitCaughtUp(ctx, t[0], t[1], 2*time.Minute); err != nil {
			fail("projectors", err)
		}
	}
	h.watch.poll(ctx) // the final cursors, through the same checks
	res := h.verdict(ctx, truth, heads, start)
	res.SetupErrors = setup
	res.OK = res.OK && len(setup) == 0
	return res
}

// finalReads resends every read whose answer was lost, until the server
// confirms it, so the truth of the read cursors is exact.
func (h *harness) finalReads(ctx context.Context) {
	for _, gid := range h.w.gids {
		for _, uid := range h.w.members[gid] {
			if r := h.rec.readOf(gid, uid); r.attempted > r.confirmed {
				for i := 0; i < 20 && h.rec.readOf(gid, uid).confirmed < r.attempted; i++ {
					h.markRead(ctx, gid, uid, r.attempted)
				}
			}
		}
	}
}

// markRead sends a read over the HTTP API and records it.
func (h *harness) markRead(ctx context.Context, gid, uid string, upto int64) {
	h.rec.readAttempt(gid, uid, upto)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := httpCall(rctx, h.c.gateways, "POST", "/v1/groups/"+gid+"/read", token(uid), fmt.Sprintf(`{"upto":%d}`, upto), nil)
	if err == nil {
		h.rec.readDone(gid, uid, upto)
	}
}

// finalSessions brings every device online once more, opens its groups and
// waits until it holds every message up to the group's head, then closes it
// (flushing its acks).
func (h *harness) finalSessions(ctx context.Context, heads map[string]int64) error {
	var wg sync.WaitGroup
	errs := make([]error, len(h.devices))
	for i, d := range h.devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.final(ctx, heads)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (d *device) final(ctx context.Context, heads map[string]int64) error {
	for attempt := 0; ; attempt++ {
		c, px, _, err := d.dial(ctx)
		if err == nil {
			defer d.end(c, px, false)
			deadline := time.Now().Add(2 * time.Minute)
			for _, g := range d.gids {
				for {
					octx, cancel := context.WithTimeout(ctx, 20*time.Second)
					err := c.Open(octx, g)
					cancel()
					// Acked by the server: handed to OnMessage first.
					acked, contig := c.Cursor(g)
					if err == nil && acked >= heads[g] {
						break
					}
					if time.Now().After(deadline) {
						return fmt.Errorf("%s: %s not caught up within 2 min: contiguous %d, head %d (open: %v)", d.name, g, contig, heads[g], err)
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
			return nil
		}
		if attempt >= 10 {
			return fmt.Errorf("%s: cannot connect for the final pull: %w", d.name, err)
		}
		time.Sleep(time.Second)
	}
}
