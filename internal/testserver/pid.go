package testserver

// PID returns the running redis-server's process id, 0 when stopped.
// Load generators read its CPU time from /proc.
func (r *Redis) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc.PID()
}

// PID returns the running clickhouse-server's process id, 0 when stopped.
func (c *ClickHouse) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc.PID()
}

// PID returns the process id, 0 once it has exited.
func (p *Proc) PID() int {
	if p == nil || p.exited() {
		return 0
	}
	return p.cmd.Process.Pid
}
