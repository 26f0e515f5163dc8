package client

import (
	"math/rand/v2"
	"time"
)

// run serves the current session and reconnects when it ends, until Close.
// The back-off restarts only after a session that lasted MaxBackoff: a
// server that ends every session at once (shutting down behind a load
// balancer, or cutting the client on every resync) gets reconnects further
// and further apart, not one per MinBackoff from each of its clients. The
// first reconnect after a session also waits a random part of
// RedialSpread: a gateway that goes away ends all its sessions at once,
// and its clients would otherwise all come back to the others within the
// first back-off's jitter (50-100 ms by default).
func (c *Client) run(s *session) {
	defer c.wg.Done()
	bo := backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff}
	began := time.Now() // of s
	for {
		var spread time.Duration
		if s != nil {
			c.serve(s)
			if c.ctx.Err() != nil || c.isClosing() {
				return // the end of the connection is Close's doing
			}
			c.reportError(s.err)
			if time.Since(began) >= c.cfg.MaxBackoff {
				bo.reset()
			}
			if c.cfg.RedialSpread > 0 {
				spread = rand.N(c.cfg.RedialSpread)
			}
		}
		if !sleep(c.ctx, bo.next()+spread) {
			return
		}
		var err error
		if s, err = c.connect(c.ctx); err != nil {
			if c.ctx.Err() != nil {
				return
			}
			c.setConnectError(err)
			c.reportError(err)
			continue
		}
		c.setConnectError(nil)
		began = time.Now()
		c.kickAck()
		// Beside serve: its pings are what notice a connection gone
		// silent, and the resync's pulls would wait a RequestTimeout each.
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.resync(s) }()
	}
}

// setConnectError records the error of the last attempt to connect (nil:
// it succeeded), for the errors of what waits for a connection.
func (c *Client) setConnectError(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.connErr = err
}

// lastConnectError is the error of the last attempt to connect, if it
// failed.
func (c *Client) lastConnectError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.connErr
}
