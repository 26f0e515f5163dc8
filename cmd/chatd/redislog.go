package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
)

// redisLog carries the go-redis library's own log lines (a pool that
// cannot dial, a pub/sub connection dropped) into the role's log, in its
// format (CHAT_LOG_FORMAT), where they went to stderr as plain text. The
// library has one logger for the process: main sets it once, and run
// names the log it writes to.
type redisLog struct{}

// redisLogTo is the log redisLog writes to; nil: stderr as plain text.
var redisLogTo atomic.Pointer[slog.Logger]

// Printf implements go-redis's internal.Logging.
func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	if l := redisLogTo.Load(); l != nil {
		l.WarnContext(ctx, msg, "from", "go-redis")
		return
	}
	fmt.Fprintln(os.Stderr, "redis:", msg)
}
