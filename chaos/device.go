package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/groupchat/chatd/client"
	"github.com/groupchat/chatd/protocol"
)

// delivery is one OnMessage call, as a device logs it.
type delivery struct {
	Gid    string
	MsgID  int64
	Cmid   string
	Sender string
	SentAt int64
	Inc    int // the device's incarnation (one per Client)
}

// device is one client device of a user: a succession of incarnations (an
// SDK Client each, as an app process that is started, closed or killed),
// each behind its own proxy. A device's log survives its incarnations, as
// an app's message store would.
type device struct {
	h    *harness
	name string
	uid  string
	gids []string

	mu     sync.Mutex
	log    []delivery
	inc    int
	seq    int
	stats  client.Stats // summed over finished incarnations
	closes int          // Close calls that reported acks not sent

	online   atomic.Bool
	pullKill atomic.Bool // the next incarnation pulls and dies before acking
	wake     chan struct{}
	proxy    atomic.Pointer[proxy] // the current incarnation's
}

func (d *device) onMessage(inc int) func(protocol.Message) {
	return func(m protocol.Message) {
		d.mu.Lock()
		d.log = append(d.log, delivery{Gid: m.Gid, MsgID: m.MsgID, Cmid: m.Cmid, Sender: m.Sender, SentAt: m.SentAt, Inc: inc})
		d.mu.Unlock()
		d.h.rec.receive(d.uid, m.Gid, m.MsgID)
	}
}

// lastDelivered is the newest msgid of gid this device was handed.
func (d *device) lastDelivered(gid string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.log) - 1; i >= 0; i-- {
		if d.log[i].Gid == gid {
			return d.log[i].MsgID
		}
	}
	return -1
}

// dial starts a new incarnation behind a new proxy.
func (d *device) dial(ctx context.Context) (*client.Client, *proxy, int, error) {
	px, err := newProxy(d.h.gatewayHosts)
	if err != nil {
		return nil, nil, 0, err
	}
	d.mu.Lock()
	d.inc++
	inc := d.inc
	d.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cl, err := client.Dial(dctx, client.Config{
		URL:          "ws://" + px.addr() + "/v1/ws",
		Token:        func(context.Context) (string, error) { return token(d.uid), nil },
		OnMessage:    d.onMessage(inc),
		MaxBackoff:   2 * time.Second,
		PingInterval: 5 * time.Second,
	})
	if err != nil {
		px.kill()
		return nil, nil, 0, err
	}
	d.proxy.Store(px)
	return cl, px, inc, nil
}

// end finishes an incarnation: gracefully (Close flushes its acks) or as a
// crash (the network is gone first, so nothing more reaches the server).
func (d *device) end(cl *client.Client, px *proxy, crash bool) {
	if crash {
		px.kill()
	}
	err := cl.Close()
	px.kill()
	d.proxy.Store(nil)
	st := cl.Stats()
	d.mu.Lock()
	d.stats.Pushes += st.Pushes
	d.stats.Pulled += st.Pulled
	d.stats.Duplicates += st.Duplicates
	d.stats.Gaps += st.Gaps
	d.stats.Pulls += st.Pulls
	d.stats.Delivered += st.Delivered
	d.stats.Acks += st.Acks
	d.stats.Resends += st.Resends
	d.stats.Reconnects += st.Reconnects
	if err != nil && !crash {
		d.closes++
	}
	d.mu.Unlock()
}

// run alternates online sessions and offline pauses until ctx ends.
func (d *device) run(ctx context.Context) {
	for ctx.Err() == nil {
		if d.pullKill.Swap(false) {
			d.pullAndDie(ctx)
		} else {
			d.session(ctx, time.Duration(4000+rand.IntN(16000))*time.Millisecond)
		}
		select {
		case <-ctx.Done():
		case <-d.wake:
		case <-time.After(time.Duration(1000+rand.IntN(5000)) * time.Millisecond):
		}
	}
}

// session is one incarnation that opens its groups, sends and reads for
// a while, then closes (most of the time) or crashes.
func (d *device) session(ctx context.Context, length time.Duration) {
	cl, px, inc, err := d.dial(ctx)
	if err != nil {
		return // the system may be down: try again after a pause
	}
	d.online.Store(true)
	sctx, cancel := context.WithTimeout(ctx, length)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.sendLoop(sctx, cl) }()
	go func() { defer wg.Done(); d.readLoop(sctx) }()
	for _, g := range d.gids {
		octx, ocancel := context.WithTimeout(sctx, 20*time.Second)
		cl.Open(octx, g)
		ocancel()
	}
	<-sctx.Done()
	wg.Wait()
	d.online.Store(false)
	crash := rand.IntN(4) == 0
	if crash {
		d.h.tl.add(event{Detail: fmt.Sprintf("%s (incarnation %d) crashes", d.name, inc)})
	}
	d.end(cl, px, crash)
}

// pullAndDie is the client killed between its pull and its ack: it logs
// in, pulls its groups, and its process dies before any ack is sent.
func (d *device) pullAndDie(ctx context.Context) {
	cl, px, inc, err := d.dial(ctx)
	if err != nil {
		d.pullKill.Store(true) // next time
		return
	}
	var pulled []string
	for _, g := range d.gids {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if cl.Open(octx, g) == nil {
			pulled = append(pulled, g)
		}
		cancel()
	}
	d.h.tl.fault("client-killed-after-pull", d.name, fmt.Sprintf("incarnation %d pulled %v and died before acking", inc, pulled), 0)
	d.end(cl, px, true)
}

// sendLoop sends to the device's groups, one send in flight at a time.
func (d *device) sendLoop(ctx context.Context, cl *client.Client) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(d.h.cfg.SendEvery.Milliseconds()/2+rand.Int64N(d.h.cfg.SendEvery.Milliseconds()+1)) * time.Millisecond):
		}
		gid := d.gids[rand.IntN(len(d.gids))]
		d.mu.Lock()
		d.seq++
		cmid := fmt.Sprintf("%s-%d", d.name, d.seq)
		d.mu.Unlock()
		rec := sendRec{Gid: gid, Uid: d.uid, Device: d.name, Cmid: cmid, At: time.Now(), MsgID: -1}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		id, err := cl.SendWithID(sctx, gid, cmid, "from "+d.name)
		cancel()
		if err != nil {
			rec.Err = err.Error()
		} else {
			rec.MsgID = id
		}
		d.h.rec.sent(rec)
		var pe *protocol.Error
		if errors.As(err, &pe) {
			d.h.refused(pe.Code, fmt.Sprintf("%s: send %s to %s refused: %v", d.name, cmid, gid, err))
		}
	}
}

// readLoop marks groups read up to what this device was handed, over the
// HTTP API, as a user reading on this device would.
func (d *device) readLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(1000+rand.IntN(2000)) * time.Millisecond):
		}
		gid := d.gids[rand.IntN(len(d.gids))]
		upto := d.lastDelivered(gid)
		if upto < 0 || upto <= d.h.rec.readOf(gid, d.uid).confirmed {
			continue
		}
		d.h.markRead(ctx, gid, d.uid, upto)
	}
}
