package redistest

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisLog keeps go-redis's log lines (a dial that failed, a pool that
// retried) out of a test run's output: they come by the hundred from tests
// that kill servers on purpose, and would bury ok and FAIL. It keeps the last
// logKeep of them, which a failed run prints.
type redisLog struct {
	mu      sync.Mutex
	lines   []string // a ring of the last logKeep lines
	next    int
	dropped int
}

const logKeep = 300

// Printf implements go-redis's logger.
func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	line := time.Now().Format("15:04:05.000 ") + fmt.Sprintf(format, v...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) < logKeep {
		l.lines = append(l.lines, line)
		return
	}
	l.lines[l.next] = line
	l.next = (l.next + 1) % logKeep
	l.dropped++
}

// dump writes the lines kept, oldest first.
func (l *redisLog) dump(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return
	}
	fmt.Fprintf(w, "go-redis's log, the last %d lines (%d earlier ones dropped):\n", len(l.lines), l.dropped)
	for i := range l.lines {
		fmt.Fprintln(w, "redis:", l.lines[(l.next+i)%len(l.lines)])
	}
}

// quietRedis sends go-redis's log to a redisLog, and returns it.
func quietRedis() *redisLog {
	l := &redisLog{}
	redis.SetLogger(l)
	return l
}
