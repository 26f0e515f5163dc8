package chaos

import (
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// proxy is a TCP proxy in front of the gateways for one client, standing
// in for a load balancer and the network: each connection goes to a
// gateway picked at random (the other one when it does not answer), and the
// harness can cut connections in the middle of a frame or kill the client's
// network outright.
type proxy struct {
	ln       net.Listener
	backends []string // host:port of the gateways

	mu    sync.Mutex
	conns map[*pipe]struct{}
	dead  bool
}

// pipe is one proxied connection.
type pipe struct {
	client, server net.Conn
	cut            chan struct{} // closed: forward half of the next chunk, then reset
	cutOnce, once  sync.Once
}

func newProxy(backends []string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, backends: backends, conns: map[*pipe]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *proxy) serve(c net.Conn) {
	first := rand.IntN(len(p.backends))
	var s net.Conn
	var err error
	for i := range p.backends {
		if s, err = net.DialTimeout("tcp", p.backends[(first+i)%len(p.backends)], 2*time.Second); err == nil {
			break
		}
	}
	if err != nil {
		reset(c)
		return
	}
	pp := &pipe{client: c, server: s, cut: make(chan struct{})}
	p.mu.Lock()
	if p.dead {
		p.mu.Unlock()
		reset(c)
		reset(s)
		return
	}
	p.conns[pp] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pp.copy(s, c) }()
	go func() { defer wg.Done(); pp.copy(c, s) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, pp)
	p.mu.Unlock()
}

// copy forwards src to dst until either ends; after a cut it forwards half
// of the next chunk and resets both sides, so the peer sees a frame that
// stops in the middle.
func (pp *pipe) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case <-pp.cut:
				dst.Write(buf[:max(n/2, 1)])
				pp.reset()
				return
			default:
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				pp.reset()
				return
			}
		}
		if err != nil { // EOF too: a half close is passed on as a close
			pp.reset()
			return
		}
	}
}

func (pp *pipe) reset() {
	pp.once.Do(func() {
		reset(pp.client)
		reset(pp.server)
	})
}

// reset closes c with an RST, as a dropped network path looks to the peer.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// cutMidFrame makes every open connection stop in the middle of the next
// chunk it carries (either way); a connection that carries nothing within
// 2 s is reset then. It returns how many connections it cut.
func (p *proxy) cutMidFrame() int {
	p.mu.Lock()
	pipes := make([]*pipe, 0, len(p.conns))
	for pp := range p.conns {
		pipes = append(pipes, pp)
	}
	p.mu.Unlock()
	for _, pp := range pipes {
		pp.cutOnce.Do(func() {
			close(pp.cut)
			time.AfterFunc(2*time.Second, pp.reset)
		})
	}
	return len(pipes)
}

// kill resets every connection and refuses new ones: the client's network
// (or process) is gone.
func (p *proxy) kill() {
	p.mu.Lock()
	p.dead = true
	pipes := make([]*pipe, 0, len(p.conns))
	for pp := range p.conns {
		pipes = append(pipes, pp)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, pp := range pipes {
		pp.reset()
	}
}
