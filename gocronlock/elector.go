package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/go-co-op/gocron/v2"
)

// ErrNotLeader is what an Elector's IsLeader returns, wrapped, while its
// instance does not lead.
var ErrNotLeader = errors.New("gocronlock: not the leader")

// Elector is a gocron.Elector on a dlock Election: give it to
// gocron.WithDistributedElector, and only the instance whose Elector leads
// the Election runs the scheduler's jobs.
//
// It campaigns in the background from NewElector on, and again whenever a
// leadership it won ends without Close (lost: its process was paused or cut
// off from Redis past the Election's TTL), so that every live instance is a
// candidate at all times. It stops when Close is called, which resigns, or
// when its dlock Client is closed, which resigns too; after that it never
// leads again.
//
// An Elector is safe for concurrent use. The methods of a nil *Elector
// return errors.
type Elector struct {
	el     *dlock.Election
	value  string
	cancel context.CancelFunc
	done   chan struct{} // closed when the campaign loop has ended

	ld      atomic.Pointer[dlock.Leadership] // the latest leadership won; nil before
	lastErr atomic.Pointer[error]            // the latest Campaign error, nil after a win

	closeOnce sync.Once
	closeErr  error
}

var _ gocron.Elector = (*Elector)(nil)

// retryFirst and retryMax bound the pause before a Campaign that failed (on a
// Redis error) is tried again: it doubles from the first to the max.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// NewElector returns an Elector that campaigns for el with value, which
// Election.Leader, Observe and `dlock leader` report while it leads (the
// Client's Name, "host:pid" by default, is a good one). It checks its
// arguments, and el's name and options, before it starts: a nil el, one not
// made by Client.Election, an empty or too long value, an Election that
// cannot work (a RedLock Client, a closed one) are errors, and no campaign
// starts. Call Close when done.
func NewElector(el *dlock.Election, value string) (*Elector, error) {
	if el == nil {
		return nil, errors.New("gocronlock: NewElector: nil *dlock.Election")
	}
	if value == "" {
		return nil, fmt.Errorf("gocronlock: NewElector %q: empty value", el.Name())
	}
	// A Campaign whose context has ended sends nothing; it returns the
	// Election's own error, if it has one, or the context's.
	probe, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := el.Campaign(probe, value); !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("gocronlock: NewElector: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Elector{el: el, value: value, cancel: cancel, done: make(chan struct{})}
	go e.run(ctx)
	return e, nil
}

// run campaigns until ctx ends, then resigns what it leads.
func (e *Elector) run(ctx context.Context) {
	defer close(e.done)
	pause := retryFirst
	for {
		ld, err := e.el.Campaign(ctx, e.value)
		if err != nil {
			if ctx.Err() != nil {
				return // Close
			}
			e.lastErr.Store(&err)
			if errors.Is(err, dlock.ErrClosed) || errors.Is(err, errors.ErrUnsupported) {
				return // the Client will not serve another Campaign
			}
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			pause = min(2*pause, retryMax)
			continue
		}
		pause = retryFirst
		e.lastErr.Store(nil)
		e.ld.Store(ld)
		select {
		case <-ld.Done():
			// Lost (or ended by the Client's Close): campaign again.
		case <-ctx.Done():
			// Resign bounds its request by a timeout of its own.
			e.closeErr = ld.Resign(context.Background())
			return
		}
	}
}

// IsLeader returns nil while this instance leads the election: from the
// moment Redis granted it the lease until its leadership ends (resigned by
// Close, lost, or at its lease's local deadline, before Redis could let
// another candidate lead). Otherwise it returns an error matching
// ErrNotLeader, which says why when it knows (the last failed Campaign, or
// how the leadership ended). It sends nothing to Redis. gocron calls it
// before each run, and skips the run on an error.
//
// A run may outlast the leadership it started under; a job that must not
// act after it can take Leadership's Context and Term.
func (e *Elector) IsLeader(context.Context) error {
	if e == nil || e.el == nil {
		return errors.New("gocronlock: IsLeader of a nil or zero Elector")
	}
	ld := e.ld.Load()
	if ld != nil && ld.Err() == nil {
		return nil
	}
	var why error
	if p := e.lastErr.Load(); p != nil {
		why = *p
	} else if ld != nil {
		why = ld.Err()
	}
	if why != nil {
		return fmt.Errorf("%w of %q: %w", ErrNotLeader, e.el.Name(), why)
	}
	return fmt.Errorf("%w of %q", ErrNotLeader, e.el.Name())
}

// Leadership returns the leadership this instance holds, or nil if it does
// not lead. Its Term fences the resource a job writes to; its Context ends
// when the leadership does.
func (e *Elector) Leadership() *dlock.Leadership {
	if e == nil {
		return nil
	}
	if ld := e.ld.Load(); ld != nil && ld.Err() == nil {
		return ld
	}
	return nil
}

// Close stops campaigning and resigns the leadership if this instance leads,
// so that the next candidate leads at once rather than after the TTL; it
// waits for the Elector's goroutine. It returns Resign's error (see
// dlock.Leadership.Resign: the Client keeps trying in the background). Close
// the Elector before its dlock Client. A second Close returns the first
// one's error.
func (e *Elector) Close() error {
	if e == nil || e.el == nil {
		return errors.New("gocronlock: Close of a nil or zero Elector")
	}
	e.closeOnce.Do(func() {
		e.cancel()
		<-e.done
	})
	return e.closeErr
}
