// Package lockhttp runs net/http handlers under a dlock lock named from the
// request: the Go counterpart of the seeds' lock annotation, which takes
// locking out of the business code. The handler runs with a context that is
// cancelled if the lock is lost and that carries the lease (FromContext),
// for its fence and for re-entry.
package lockhttp

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
)

// Option configures Handler.
type Option func(*handler)

type handler struct {
	c        *dlock.Client
	name     func(*http.Request) (string, error)
	next     http.Handler
	opts     []dlock.Option
	wait     time.Duration // 0: TryLock
	waitSet  bool
	busyCode int
}

// Wait makes a request whose lock is held wait for it up to d (and never
// past the request's own context) before it is refused. Default: the
// request's context alone bounds the wait.
func Wait(d time.Duration) Option {
	return func(h *handler) { h.wait, h.waitSet = d, true }
}

// NoWait makes a request whose lock is held be refused at once.
func NoWait() Option { return Wait(0) }

// BusyStatus sets the status of a request refused because its lock stayed
// held. Default: 409 Conflict, with Retry-After: 1.
func BusyStatus(code int) Option { return func(h *handler) { h.busyCode = code } }

// LockOptions sets the options of the locks (WithTTL, ...).
func LockOptions(opts ...dlock.Option) Option {
	return func(h *handler) { h.opts = append(h.opts, opts...) }
}

// Handler returns a handler that takes the Mutex name(r) names, runs next
// under it and unlocks it, also if next panics. A name func that fails, or
// names "", answers 400 with its error; a lock that stays held, BusyStatus;
// a failure to reach Redis, 503.
func Handler(c *dlock.Client, name func(*http.Request) (string, error), next http.Handler, opts ...Option) http.Handler {
	h := &handler{c: c, name: name, next: next, busyCode: http.StatusConflict}
	for _, o := range opts {
		o(h)
	}
	return h
}

// FromContext returns the lease a handler runs under.
func FromContext(ctx context.Context) (*dlock.Lease, bool) {
	return dlock.LeaseFromContext(ctx)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.c == nil || h.name == nil || h.next == nil {
		http.Error(w, "lockhttp: Handler needs a Client, a name func and a handler", http.StatusInternalServerError)
		return
	}
	name, err := h.name(r)
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case name == "":
		http.Error(w, "no lock name in the request", http.StatusBadRequest)
		return
	}
	m := h.c.Mutex(name, h.opts...)
	ctx := r.Context()
	var l *dlock.Lease
	switch {
	case h.waitSet && h.wait == 0:
		l, err = m.TryLock(ctx)
	case h.waitSet:
		wctx, cancel := context.WithTimeout(ctx, h.wait)
		l, err = m.Lock(wctx)
		cancel()
	default:
		l, err = m.Lock(ctx)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return // the client has gone
	case errors.Is(err, dlock.ErrNotAcquired):
		w.Header().Set("Retry-After", strconv.Itoa(1))
		http.Error(w, "busy: "+name+" is locked", h.busyCode)
		return
	default:
		http.Error(w, "lock: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer l.Unlock(context.WithoutCancel(ctx))
	lctx, cancel := l.Context(ctx)
	defer cancel()
	h.next.ServeHTTP(w, r.WithContext(lctx))
}
