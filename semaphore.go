package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// Semaphore is a counting semaphore shared by every process that uses the same
// name on the same Redis: at most its total of permits are held at once. Each
// successful Acquire or TryAcquire returns a Lease for its permits, with a
// lease of its own, so the permits of a holder that died come back after its TTL.
//
// A Semaphore is immutable and safe for concurrent use; it does not re-enter.
// Waiters are served in strict order of arrival, but a request for more than
// the total holds nobody up. The total is Redis's, the same for every process:
// the one SetPermits stored, else the permits of the first process to acquire
// while the name is in use; a Client that asked for another logs a warning.
// See docs/failure-model.md.
type Semaphore struct {
	a       acquirer
	permits int64
}

// maxPermits is the most permits a Semaphore may have: Redis's scripts count
// exactly up to 2^53.
const maxPermits = 1 << 53

// Semaphore returns the semaphore called name (valid as for Client.Mutex),
// whose total is permits while Redis holds none. permits must be from 1 to
// 2^53; an invalid argument or option is the error of every call.
func (c *Client) Semaphore(name string, permits int64, opts ...Option) *Semaphore {
	s := &Semaphore{a: c.acquirer(protocol.SemKind, name, opts), permits: permits}
	if s.a.err == nil && (permits < 1 || permits > maxPermits) {
		s.a.err = errs.Op(nil, nil, "Semaphore %q: %d permits: want at least 1 and at most 2^53", name, permits)
	}
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.acquirer().k.Name }

// Acquire takes n permits, waiting in line until they are free, or until ctx
// is done (ErrNotAcquired and ctx.Err(), as for Mutex.Lock). A request for
// more than the total waits until SetPermits raises it.
func (s *Semaphore) Acquire(ctx context.Context, n int64) (*Lease, error) {
	const op = "acquire"
	a := s.acquirer()
	if a.err == nil && n < 1 {
		return nil, errs.Op(nil, nil, "%s %d permits of %q: want at least 1", op, n, a.k.Name)
	}
	if err := a.check(ctx, op); err != nil {
		return nil, err
	}
	s.readTotal(a)
	l, err := a.acquire(ctx, op, true, protocol.KindArgs{Permits: n, Total: s.permits})
	if errors.Is(err, ErrNotAcquired) {
		if total, ok := a.e.totals.get(a.k.Name); ok && total > 0 && total != s.permits {
			err = fmt.Errorf("%w; this process asked for a total of %d, and Redis held %d when this Client last looked (the total in Redis counts: SetPermits changes it)", err, s.permits, total)
		}
	}
	return l, err
}

// TryAcquire takes n permits if they are free and nobody waits ahead;
// otherwise the error matches ErrNotAcquired and says how many permits are in
// use of what total.
func (s *Semaphore) TryAcquire(ctx context.Context, n int64) (*Lease, error) {
	const op = "tryacquire"
	a := s.acquirer()
	if a.err == nil && n < 1 {
		return nil, errs.Op(nil, nil, "%s %d permits of %q: want at least 1", op, n, a.k.Name)
	}
	if err := a.check(ctx, op); err != nil {
		return nil, err
	}
	if a.e.hooks == nil {
		return s.try(ctx, a, n)
	}
	// TryAcquire makes its own attempt, whose answer says why it failed.
	return a.bracket(ctx, op, func(ctx context.Context) (*Lease, error) { return s.try(ctx, a, n) })
}

// try makes TryAcquire's one attempt, as the engine's take does for a call
// that does not wait, but asks the script to say, if it takes nothing, how
// many permits are in use of what total.
func (s *Semaphore) try(ctx context.Context, a *acquirer, n int64) (*Lease, error) {
	const op = "tryacquire"
	if ctx.Err() != nil {
		return nil, a.gaveUp(ctx, op, nil)
	}
	sent := time.Now()
	t := &turn{a: a, op: op, owner: a.e.newOwner(), start: sent}
	l, _, r, err := a.attempt(ctx, t, sent, protocol.SemWhy, protocol.KindArgs{Permits: n, Total: s.permits})
	switch {
	case l != nil:
		s.readTotal(a)
		return l, nil
	case err != nil:
		// The script may have run: give back whatever it took.
		a.abandon(ctx, t.owner, sent, r.Doubt)
		if ended(ctx) {
			return nil, a.gaveUp(ctx, op, nil)
		}
		return nil, err
	case r.Doubt != 0:
		// Refused, but a copy whose reply was lost may still take permits.
		a.abandon(ctx, t.owner, sent, r.Doubt)
	}
	if r.Sem == nil {
		return nil, errs.Op(ErrNotAcquired, nil, "%s %d permits of %q: permits in use", op, n, a.k.Name)
	}
	st := *r.Sem
	s.sawTotal(a, st)
	var why strings.Builder
	if n > st.Total {
		fmt.Fprintf(&why, "more than the semaphore's total of %d", st.Total)
	} else {
		fmt.Fprintf(&why, "%d of %d permits in use", st.Used, st.Total)
		if st.Ahead > 0 {
			fmt.Fprintf(&why, ", and waiters queued before this call want %d", st.Ahead)
		}
	}
	if st.Total != s.permits {
		fmt.Fprintf(&why, "; this process asked for a total of %d (the total in Redis counts: SetPermits changes it)", s.permits)
	}
	return nil, errs.Op(ErrNotAcquired, nil, "%s %d permits of %q: %s", op, n, a.k.Name, why.String())
}

// SetPermits sets the total for every process that uses the name, until Delete
// removes it, and wakes the waiters that now fit. A lower total takes no
// permits back: nobody acquires until fewer than it are in use. permits must
// be from 1 to 2^53.
func (s *Semaphore) SetPermits(ctx context.Context, permits int64) error {
	a := s.acquirer()
	if a.err != nil {
		return a.err
	}
	if permits < 1 || permits > maxPermits {
		return errs.Op(nil, nil, "set %d permits of %q: want at least 1 and at most 2^53", permits, a.k.Name)
	}
	if _, err := s.call(ctx, "set permits of", protocol.SemSetTotal, permits); err != nil {
		return err
	}
	a.e.totals.update(a.k.Name, permits)
	return nil
}

// Available returns how many permits are free: the total less what live
// holders have. A request for that many may still wait behind earlier waiters.
func (s *Semaphore) Available(ctx context.Context) (int64, error) {
	return s.call(ctx, "available permits of", protocol.SemAvailable, s.defaultTotal())
}

// Delete removes the total SetPermits stored, and reports whether there was
// one; the permits given to Client.Semaphore count again. Holders and waiters
// are not affected.
func (s *Semaphore) Delete(ctx context.Context) (bool, error) {
	v, err := s.call(ctx, "delete", protocol.SemDeleteTotal, s.defaultTotal())
	return v == 1, err
}

// call runs one of the semaphore's own modes.
func (s *Semaphore) call(ctx context.Context, op string, mode protocol.SemMode, total int64) (int64, error) {
	a := s.acquirer()
	if err := a.check(ctx, op); err != nil {
		return 0, err
	}
	v, err := a.e.sems.Semaphore(ctx, a.k, a.e.newOwner(), mode, total)
	a.e.heard(err)
	return v, err
}

// defaultTotal is the total when Redis holds none: the permits s was made with.
func (s *Semaphore) defaultTotal() int64 {
	if s == nil {
		return 0
	}
	return s.permits
}

func (s *Semaphore) acquirer() *acquirer {
	if s == nil || s.a.e == nil && s.a.err == nil {
		return &acquirer{err: errors.New("dlock: nil or zero Semaphore; get one from Client.Semaphore")}
	}
	return &s.a
}

// readTotal reads, in the background, the total Redis holds for s, the
// first time a's Client acquires s's name, and warns if it differs from s's
// (sawTotal).
func (s *Semaphore) readTotal(a *acquirer) {
	e, name := a.e, a.k.Name
	if !e.totals.add(name, 0) {
		return
	}
	if !e.bg.goDo(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := e.sems.SemTotal(ctx, a.k)
		if err != nil {
			e.log.Debug("dlock: read a Semaphore's total", "lock", name, "err", err)
			e.totals.forget(name) // read again at the next acquire
			return
		}
		e.totals.update(name, st.Total)
		s.warn(a, st)
	}) {
		e.totals.forget(name)
	}
}

// sawTotal notes st, a total Redis answered a's Client with for s, and warns
// if it is the first the Client has seen for s's name and differs from s's.
func (s *Semaphore) sawTotal(a *acquirer, st protocol.SemTotal) {
	if a.e.totals.add(a.k.Name, st.Total) {
		s.warn(a, st)
	} else {
		a.e.totals.update(a.k.Name, st.Total)
	}
}

// warn logs a warning if st's total differs from s's.
func (s *Semaphore) warn(a *acquirer, st protocol.SemTotal) {
	if st.Total == 0 || st.Total == s.permits {
		return
	}
	from := "the first process to acquire it"
	if st.Set {
		from = "SetPermits"
	}
	a.e.log.Warn("dlock: a Semaphore's total in Redis differs from the one this process gave it; the total in Redis counts, for every process",
		"lock", a.k.Name, "total", st.Total, "set_by", from, "this_process", s.permits,
		"to_change_it", fmt.Sprintf("Semaphore.SetPermits, or: dlock permits %s N", a.k.Name))
}

// semTotals is, per Semaphore name, the total Redis held when its Client
// last looked (0: none, or not read yet): a Client reads a name's total once
// (readTotal) and warns once if it differs from its own. It keeps the first
// maxTotals names it acquires: it neither reads nor warns about the names
// after those, so that a process using many names costs Redis no more than
// one read for each of the first ones.
type semTotals struct {
	mu sync.Mutex
	m  map[string]int64
}

const maxTotals = 1024

// add records total for name, and reports whether it did: the name was new,
// and there was room for it.
func (ts *semTotals) add(name string, total int64) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.m == nil {
		ts.m = make(map[string]int64)
	}
	if _, ok := ts.m[name]; ok || len(ts.m) >= maxTotals {
		return false
	}
	ts.m[name] = total
	return true
}

// update records total for name if the name is known.
func (ts *semTotals) update(name string, total int64) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.m[name]; ok {
		ts.m[name] = total
	}
}

// get returns the total recorded for name.
func (ts *semTotals) get(name string) (int64, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	total, ok := ts.m[name]
	return total, ok
}

// forget removes name.
func (ts *semTotals) forget(name string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.m, name)
}
