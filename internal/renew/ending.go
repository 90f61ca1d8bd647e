package renew

import (
	"context"
	"sync"
	"time"
)

// ending is the end of a lease's term: why it ended, and a channel closed
// when it does. It is a context.Context, done at the end and never before,
// with an AfterFunc method that context.AfterFunc and the contexts derived
// from it use instead of a goroutine of their own.
//
// Most leases end without anyone waiting for it, so an ending makes nothing
// until asked: its channel when Done is first called, its list of functions
// when AfterFunc is. It lives inside its term, and is not to be copied.
type ending struct {
	mu     sync.Mutex
	err    error         // why it ended; nil until then
	done   chan struct{} // made by Done before the end, closed at it
	afters *afterEnd     // run at the end, each on a goroutine of its own
}

// afterEnd is a function waiting in an ending's list (ending.AfterFunc).
type afterEnd struct {
	f    func()
	next *afterEnd
}

var _ context.Context = (*ending)(nil)

// End ends e with cause, and reports whether it did: the first end says
// why, and those after it change nothing.
func (e *ending) End(cause error) bool {
	if cause == nil {
		cause = context.Canceled
	}
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		return false
	}
	e.err = cause
	if e.done != nil {
		close(e.done)
	}
	afters := e.afters
	e.afters = nil
	e.mu.Unlock()
	for a := afters; a != nil; a = a.next {
		go a.f()
	}
	return true
}

// Cause returns why e ended, or nil if it has not.
func (e *ending) Cause() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Deadline reports no deadline: an ending has none.
func (e *ending) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns a channel that is closed when e ends.
func (e *ending) Done() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done == nil {
		if e.err != nil {
			return ClosedChan
		}
		e.done = make(chan struct{})
	}
	return e.done
}

// Err returns context.Canceled once e has ended, else nil; cause tells why.
func (e *ending) Err() error {
	if e.Cause() != nil {
		return context.Canceled
	}
	return nil
}

// Value returns nil: an ending carries no values.
func (e *ending) Value(key any) any { return nil }

// AfterFunc arranges for f to run on a goroutine of its own once e has
// ended, at once if it has, as context.AfterFunc does. stop undoes it, and
// reports whether that kept f from running: false once f has started, or
// after an earlier stop.
func (e *ending) AfterFunc(f func()) (stop func() bool) {
	e.mu.Lock()
	if e.err != nil {
		e.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a := &afterEnd{f: f, next: e.afters}
	e.afters = a
	e.mu.Unlock()
	return func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		for p := &e.afters; *p != nil; p = &(*p).next {
			if *p == a {
				*p = a.next
				return true
			}
		}
		return false
	}
}

// ClosedChan is a channel that is closed: the Done of what has ended.
var ClosedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()
