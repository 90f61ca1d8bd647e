package protocol

// Sending a request, copy by copy. go-redis sends a request again by itself
// when its reply is lost, and the first copy can still reach Redis after the
// second one's answer came back: after its owner's next request, even after
// its Unlock. So the acquire and release calls are sent with go-redis's
// retries off, and the node sends them again itself, as go-redis would, but
// knowing when a copy whose outcome is unknown is still out. Each acquire
// carries a deadline in the server's time, after which Redis ignores it: a
// copy that arrives later takes nothing, and the release that ends an owner
// whose acquire is still out leaves a record, until that deadline, that
// refuses it (lua/lib_common.lua: records).

import (
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// onceCmd is a script call that go-redis sends once, whatever happens to it:
// the node decides whether to send it again. It holds its redis.Cmd, so that
// the two are one allocation.
type onceCmd struct{ redis.Cmd }

// NoRetry tells go-redis never to send the call again by itself.
func (*onceCmd) NoRetry() bool { return true }

// newOnce returns the command a, sent once; its keys start at a[3].
func newOnce(ctx context.Context, a []any) *onceCmd {
	c := &onceCmd{Cmd: *redis.NewCmd(ctx, a...)}
	c.SetFirstKeyPos(3)
	return c
}

// retryPolicy is how often, and after which pauses, the node sends a request
// again whose copy failed on the way: as the Redis client would (its
// MaxRetries, MinRetryBackoff and MaxRetryBackoff).
type retryPolicy struct {
	max        int
	minBackoff time.Duration
	maxBackoff time.Duration
}

// retryPolicyOf reads rdb's retry settings, which go-redis has given their
// defaults (3 tries more, 8 ms to 512 ms; a Cluster's, its redirections) by
// now.
func retryPolicyOf(rdb redis.UniversalClient) retryPolicy {
	p := retryPolicy{max: 3, minBackoff: 8 * time.Millisecond, maxBackoff: 512 * time.Millisecond}
	switch r := rdb.(type) {
	case *redis.Client:
		o := r.Options()
		p = retryPolicy{o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff}
	case *redis.ClusterClient:
		// A Cluster client sends a request again on a network failure up
		// to MaxRedirects times, its MaxRetries off by default.
		o := r.Options()
		p = retryPolicy{max(o.MaxRetries, o.MaxRedirects), o.MinRetryBackoff, o.MaxRetryBackoff}
	case *redis.Ring:
		o := r.Options()
		p = retryPolicy{o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff}
	}
	p.max = max(p.max, 0)
	p.minBackoff, p.maxBackoff = max(p.minBackoff, 0), max(p.maxBackoff, 0)
	return p
}

// backoff is the pause before try (1 for the first try again): go-redis's,
// a random pause from minBackoff up to minBackoff << try, at most maxBackoff.
func (p retryPolicy) backoff(try int) time.Duration {
	if p.minBackoff == 0 {
		return 0
	}
	d := p.minBackoff << min(try, 30)
	if d < p.minBackoff || d > p.maxBackoff {
		d = p.maxBackoff
	}
	return min(p.minBackoff+rand.N(d), p.maxBackoff)
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// unsent reports whether err, the failure of one copy of a request, shows
// that Redis did not run it: no connection could be had or made, the client
// was closed, or Redis answered with an error (every dlock script raises its
// errors before it writes). Any other failure (a reset connection, a read
// that timed out, the caller's context that ended while the reply was out)
// leaves the copy's outcome unknown: it may have run, or may still run.
func unsent(err error) bool {
	var rerr redis.Error
	var nerr *net.OpError
	switch {
	case errors.As(err, &rerr):
		return true
	case errors.As(err, &nerr) && nerr.Op == "dial":
		return true
	case errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed):
		return true
	}
	return false
}

// retryable reports whether a copy that failed with err may be followed by
// another, as go-redis would send one: after a network failure or timeout,
// or a reply of a server that cannot serve the request now (it is loading,
// a replica, its cluster down or its slot moving).
func retryable(err error) bool {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		var nerr *net.OpError
		return errors.As(err, &nerr) && nerr.Op == "dial"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrPoolTimeout):
		return true
	case errors.Is(err, redis.ErrClosed):
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range retryReplies {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
		return false
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// retryReplies start the error replies that go-redis sends a request again
// after: the server cannot serve it now, and did not run it.
var retryReplies = []string{"LOADING ", "READONLY ", "MASTERDOWN ", "CLUSTERDOWN ", "TRYAGAIN ", "NOREPLICAS ", "ERR max number of clients reached"}

// serverClock is what a node knows of its server's clock: the offset of the
// server's time from the local wall clock, learned from replies that carry
// the server's time. Requests are dated by it; its error costs nothing but
// a request sent again (a deadline that had passed when it arrived) or a
// record kept longer than needed, since Redis compares each deadline with its
// own clock.
type serverClock struct {
	offset atomic.Int64 // ms: the server's time less the local wall clock's
	// last is the deadline argument handed out last, boxed once: every
	// acquire carries one, and a deadline rounded up to deadlineStep serves
	// the calls of that step without an allocation each.
	last atomic.Pointer[deadlineArg]
}

type deadlineArg struct {
	ms  int64
	arg any
}

// RequestTTL is how long an acquire may take to reach Redis: a copy that
// arrives later changes nothing. It bounds how long a copy whose reply was
// lost can still arrive, and so how long the record that refuses it lives.
const RequestTTL = 10 * time.Second

// deadlineStep is the rounding of a request's deadline (up).
const deadlineStep = 64

// learn notes the server's time (µs), read from a reply just received.
func (c *serverClock) learn(serverMicros int64) {
	if serverMicros > 0 {
		c.offset.Store(serverMicros/1000 - time.Now().UnixMilli())
	}
}

// deadline returns the deadline of a request sent now, in the server's
// milliseconds, and the same as a script argument.
func (c *serverClock) deadline() (int64, any) {
	ms := time.Now().UnixMilli() + c.offset.Load() + RequestTTL.Milliseconds()
	ms += deadlineStep - 1 - (ms+deadlineStep-1)%deadlineStep
	if a := c.last.Load(); a != nil && a.ms == ms {
		return ms, a.arg
	}
	a := &deadlineArg{ms, ms}
	c.last.Store(a)
	return ms, a.arg
}

// RequestDeadline returns, for a Backend that dates its acquires (a node),
// the deadline it would give one sent now, in its server's milliseconds: no
// earlier than that of any acquire it sent before. It returns 0 for any
// other Backend.
func RequestDeadline(b Backend) int64 {
	if d, ok := b.(interface{ requestDeadline() int64 }); ok {
		return d.requestDeadline()
	}
	return 0
}

func (n *Node) requestDeadline() int64 {
	ms, _ := n.clock.deadline()
	return ms
}

// sent is the outcome of sending a request copy by copy: the reply or the
// last copy's error; doubt, whether a copy's outcome is unknown (it may
// have run, or may still arrive); and retried, whether the reply follows
// such a copy.
type sent struct {
	v       any
	err     error
	doubt   bool
	retried bool
}

// send sends the script call a (EVALSHA, its SHA and the rest) with go-redis's
// retries off, then EVAL of s's body if the server does not know it, and
// sends it again, as go-redis would have, while a copy fails in a way that
// may not recur and tries are left.
func (n *Node) send(ctx context.Context, s *redis.Script, a []any) sent {
	var r sent
	for try := 0; ; try++ {
		v, err := n.sendOnce(ctx, s, a)
		if err == nil {
			r.v, r.err = v, nil
			return r
		}
		r.err = err
		if !unsent(err) {
			r.doubt = true
		}
		if try >= n.retry.max || !retryable(err) || ctx.Err() != nil {
			return r
		}
		r.retried = r.doubt
		if !sleep(ctx, n.retry.backoff(try+1)) {
			return r
		}
	}
}

// sendOnce sends one copy of the call a: EVALSHA, then, if the server does
// not know the script (it did not run it), EVAL of its body.
func (n *Node) sendOnce(ctx context.Context, s *redis.Script, a []any) (any, error) {
	v, err := n.process(ctx, a)
	if noScript(err) {
		a[0], a[1] = "eval", srcArg(s)
		v, err = n.process(ctx, a)
		a[0], a[1] = "evalsha", shaArg(s)
	}
	return v, err
}

// process sends one copy of the command a, which go-redis sends once.
func (n *Node) process(ctx context.Context, a []any) (any, error) {
	c := newOnce(ctx, a)
	_ = n.proc.Process(ctx, c)
	return c.Result()
}

// srcArg returns s's body as a script argument, boxed once.
func srcArg(s *redis.Script) any {
	if v, ok := srcs.Load(s); ok {
		return v
	}
	var c srcReader
	s.Eval(context.Background(), &c, nil)
	v, _ := srcs.LoadOrStore(s, any(c.src))
	return v
}

// srcs holds each script's body as a script argument.
var srcs sync.Map // *redis.Script -> any

// srcReader is a redis.Scripter that sends nothing: its Eval notes the body
// of the script it is given, which redis.Script keeps to itself.
type srcReader struct{ src string }

func (r *srcReader) Eval(ctx context.Context, script string, _ []string, _ ...any) *redis.Cmd {
	r.src = script
	return redis.NewCmd(ctx)
}
func (r *srcReader) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmd(ctx)
}
func (r *srcReader) EvalRO(ctx context.Context, script string, _ []string, _ ...any) *redis.Cmd {
	r.src = script
	return redis.NewCmd(ctx)
}
func (r *srcReader) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmd(ctx)
}
func (r *srcReader) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceCmd(ctx)
}
func (r *srcReader) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringCmd(ctx)
}

// noDeadline is a deadline argument that never passes, for requests whose
// late copy needs no refusal (a re-entry sets a count).
var noDeadline any = int64(math.MaxInt64 / 2)
