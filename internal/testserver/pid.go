package testserver

// PID returns the running redis-server's process id, 0 when stopped.
// Load generators read its CPU time from /proc.
func (r *Redis) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc.pid()
}

// PID returns the running clickhouse-server's process id, 0 when stopped.
func (c *ClickHouse) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc.pid()
}

func (p *proc) pid() int {
	if p == nil || p.exited() {
		return 0
	}
	return p.cmd.Process.Pid
}
