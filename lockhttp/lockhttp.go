// Package lockhttp runs net/http handlers under a dlock lock named from the
// request, so that the handler's own code does no locking: requests that
// name the same lock (say, the refunds of one order) run one at a time
// across every process of a service. The handler runs with a context that
// is cancelled if the lock is lost and that carries the lease (FromContext),
// for its fence and for re-entry.
//
// A process that dies mid-request holds the request's lock until its lease
// runs out: DefaultTTL (10s), whatever the Client's TTL, unless LockOptions
// gives dlock.WithTTL. Under an idempotency.Middleware, whose key is held the
// same way by its own lock, give both the same TTL (idempotency.WithLeaseTTL).
package lockhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
)

// DefaultTTL is the TTL of a request's lock unless LockOptions gives
// dlock.WithTTL: how long a process that died mid-request keeps the lock.
const DefaultTTL = 10 * time.Second

// Option configures Handler.
type Option func(*handler) error

type handler struct {
	c        *dlock.Client
	name     func(*http.Request) (string, error)
	next     http.Handler
	opts     []dlock.Option
	wait     time.Duration // 0: TryLock
	waitSet  bool
	busyCode int
	err      error // of Handler's arguments: every request is answered 500
}

// Wait makes a request whose lock is held wait for it up to d (and never
// past the request's own context) before it is refused. Default: the
// request's context alone bounds the wait.
func Wait(d time.Duration) Option {
	return func(h *handler) error {
		if d < 0 {
			return fmt.Errorf("lockhttp: Wait(%v): want 0 or more", d)
		}
		h.wait, h.waitSet = d, true
		return nil
	}
}

// NoWait makes a request whose lock is held be refused at once.
func NoWait() Option { return Wait(0) }

// BusyStatus sets the status of a request refused because its lock stayed
// held: a 4xx or 5xx. Default: 409 Conflict, with Retry-After: 1.
func BusyStatus(code int) Option {
	return func(h *handler) error {
		if code < 400 || code > 599 {
			return fmt.Errorf("lockhttp: BusyStatus(%d): want a 4xx or 5xx status", code)
		}
		h.busyCode = code
		return nil
	}
}

// LockOptions sets the options of the locks (WithTTL, ...). Default: a TTL
// of DefaultTTL (10s), not the Client's.
func LockOptions(opts ...dlock.Option) Option {
	return func(h *handler) error {
		h.opts = append(h.opts, opts...)
		return nil
	}
}

// Handler returns a handler that takes the Mutex name(r) names, runs next
// under it and unlocks it, also if next panics. A name func that fails, or
// names "", answers 400 with its error; a lock that stays held, BusyStatus;
// a failure to reach Redis, 503. A Handler made with a nil or zero Client, a
// nil name func or handler, or a bad Option answers every request with 500
// and the error, and sends nothing to Redis.
func Handler(c *dlock.Client, name func(*http.Request) (string, error), next http.Handler, opts ...Option) http.Handler {
	h := &handler{c: c, name: name, next: next, busyCode: http.StatusConflict, opts: []dlock.Option{dlock.WithTTL(DefaultTTL)}}
	switch {
	case c.ID() == "": // nil or zero
		h.err = errors.New("lockhttp: Handler: nil or zero dlock Client; get one from dlock.New")
	case name == nil:
		h.err = errors.New("lockhttp: Handler: nil name func")
	case isNil(next):
		h.err = errors.New("lockhttp: Handler: nil handler")
	}
	for _, o := range opts {
		if h.err != nil {
			break
		}
		if o == nil {
			h.err = errors.New("lockhttp: Handler: nil Option")
			break
		}
		h.err = o(h)
	}
	return h
}

// isNil reports whether v is nil, or an interface holding a nil pointer,
// func, map, slice or channel.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// FromContext returns the lease a handler runs under.
func FromContext(ctx context.Context) (*dlock.Lease, bool) {
	return dlock.LeaseFromContext(ctx)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.err != nil {
		http.Error(w, h.err.Error(), http.StatusInternalServerError)
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
