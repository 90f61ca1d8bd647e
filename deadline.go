package dlock

// Requests bounded by their caller's context, and the contexts of
// clean-up that outlives it.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/timing"
)

// ctxErr is the error of a context that ended, with its cause if it has its
// own.
func ctxErr(ctx context.Context) error {
	cerr := ctx.Err()
	if cerr == nil {
		cerr = context.DeadlineExceeded // past the deadline; the timer has not fired yet
	}
	if cause := context.Cause(ctx); cause != nil && cause != cerr {
		cerr = fmt.Errorf("%w (cause: %w)", cerr, cause)
	}
	return cerr
}

// ended reports whether ctx is done or past its deadline: a request cut off
// by the deadline (go-redis sets it on the connection) can fail a moment
// before ctx's own timer fires.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// errLeftBehind marks the error of a call that within gave up on; the caller
// names the call.
var errLeftBehind = errors.New("left to finish in the background")

// within runs call, which makes one request to Redis, and returns its result,
// or ctx's error as soon as ctx ends, whichever comes first. go-redis does not
// give up a request in flight when its context ends, so without this a stalled
// Redis would hold a caller for the Redis client's timeouts and retries, well
// past its deadline (its autopipeliner for tens of seconds). A request left
// behind goes on in the background; late, if not nil, then gets its outcome:
// say, to release a lock that was taken after its caller had gone. Close waits
// for it.
//
// Waiting on another goroutine costs a hand-off per call (about 18µs on a
// 2-vCPU VM), so where go-redis honors deadlines itself (a Redis client made
// with ContextTimeoutEnabled, without WithAutoPipeline) call runs inline.
func within[T any](e *engine, ctx context.Context, call func() (T, error), late func(T, error)) (T, error) {
	if inline(e, ctx) {
		return call()
	}
	type outcome struct {
		v   T
		err error
	}
	done := make(chan outcome, 1)
	var state atomic.Int32 // 0: running; 1: finished for the caller; 2: the caller left
	if !e.bg.goDo(func() {
		v, err := call()
		if state.CompareAndSwap(0, 1) {
			done <- outcome{v, err}
		} else if late != nil {
			late(v, err)
		}
	}) {
		return call()
	}
	select {
	case o := <-done:
		return o.v, o.err
	case <-ctx.Done():
		if !state.CompareAndSwap(0, 2) {
			o := <-done // it finished just now
			return o.v, o.err
		}
		var zero T
		return zero, fmt.Errorf("%w: %w", errLeftBehind, context.Cause(ctx))
	}
}

// inline reports whether within would make its call on the caller's
// goroutine: go-redis gives up the request at ctx's deadline by itself, or
// ctx can never end. A caller can then skip within and the closures it takes.
func inline(e *engine, ctx context.Context) bool {
	return e.traits.CtxAware || ctx.Done() == nil
}

// cleanupContext returns a context for releasing a lock after the caller's
// context may have ended: it keeps ctx's values but not its cancellation, and
// is bounded by cleanupTimeout. A context that can never be cancelled is used
// as it is; the Redis client's own timeouts bound the call.
func cleanupContext(ctx context.Context, ttl time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), timing.CleanupTimeout(ttl))
}
