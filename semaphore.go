package dlock

import (
	"context"
	"errors"
	"fmt"
)

// Semaphore is a counting semaphore shared by every process that uses the
// same name on the same Redis: at most its total number of permits are held
// at once.
//
// A Semaphore is a cheap, immutable description, safe for concurrent use.
// Each successful Acquire or TryAcquire returns a Lease for the permits it
// took, with a lease of its own: it is renewed while held (unless
// WithoutRenewal), and the permits of a holder that died come back after its
// TTL, so a crashed process cannot leak them. Release (or Unlock) gives them
// back. Each acquisition is a new holder: there is no re-entry, and a Lease's
// context does not make a later Acquire share its permits. The zero Semaphore
// is not usable; get one from Client.Semaphore.
//
// Waiters are served in order of arrival, strictly: an Acquire gets its
// permits once they are free after every waiter queued before it has had its
// own, so a request for many permits is never starved by a stream of small
// ones (those that come after it wait behind it, even while they would fit),
// and waiters that all fit are served together. The one exception is a
// request for more permits than the total: it can never be served while the
// total stays as it is, so it holds nobody up. Acquire waits for it (until ctx
// ends, or SetPermits raises the total enough), as golang.org/x/sync's
// semaphore does; TryAcquire fails at once with an error that says so. A
// release wakes only the waiters that can now proceed. A waiter whose context
// ends leaves the queue at once; one whose process died lapses after three
// keep-alives (TTL/6 each, at most 5s).
//
// The total: SetPermits stores one in Redis, which lasts until Delete removes
// it. While none is stored, the permits given to Client.Semaphore are the
// total; the first acquisition keeps its number with the semaphore's other
// state for as long as the semaphore is in use (held or waited for), and
// later callers use that. Lowering the total below what is held takes effect
// as holders release.
type Semaphore struct {
	x       exclusive
	permits int64
}

// Semaphore returns the semaphore called name, with permits permits if Redis
// holds no total for it yet. Any byte string is a valid name; the empty one is
// not, and neither is permits below 1 or an invalid option: those errors are
// returned by every call. A Semaphore's keys do not collide with those of a
// Mutex of the same name.
func (c *Client) Semaphore(name string, permits int64, opts ...Option) *Semaphore {
	s := &Semaphore{x: c.exclusive(semKind, name, opts), permits: permits}
	if s.x.err == nil && permits < 1 {
		s.x.err = fmt.Errorf("dlock: Semaphore %q: %d permits: want at least 1", name, permits)
	}
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.engine().k.name }

// Acquire takes n permits, waiting until they are free and it is this
// caller's turn, or until ctx is done. ctx bounds the wait only, never the
// lease. If ctx ends first, the error matches both ErrNotAcquired and
// ctx.Err(), and the caller's place in the queue is given up. An Acquire of
// more permits than the total waits until the total is raised.
func (s *Semaphore) Acquire(ctx context.Context, n int64) (*Lease, error) {
	return s.acquire(ctx, "acquire", true, n)
}

// TryAcquire takes n permits if they are free and nobody is queued before it,
// in one round trip; otherwise the error matches ErrNotAcquired.
func (s *Semaphore) TryAcquire(ctx context.Context, n int64) (*Lease, error) {
	return s.acquire(ctx, "tryacquire", false, n)
}

func (s *Semaphore) acquire(ctx context.Context, op string, wait bool, n int64) (*Lease, error) {
	x := s.engine()
	if x.err != nil {
		return nil, x.err
	}
	if n < 1 {
		return nil, fmt.Errorf("dlock: %s %d permits of %q: want at least 1", op, n, x.k.name)
	}
	l, err := x.lock(ctx, op, wait, []any{n, s.permits})
	if err == errTooMany {
		return nil, fmt.Errorf("%w: %s %d permits of %q: more than the semaphore's total", ErrNotAcquired, op, n, x.k.name)
	}
	return l, err
}

// SetPermits stores the total number of permits in Redis, where it lasts
// until Delete, and wakes the waiters that can proceed under the new total.
func (s *Semaphore) SetPermits(ctx context.Context, permits int64) error {
	x := s.engine()
	if x.err != nil {
		return x.err
	}
	if permits < 1 {
		return fmt.Errorf("dlock: set %d permits of %q: want at least 1", permits, x.k.name)
	}
	if err := x.c.checkCall(ctx, "set permits of", x.k.name); err != nil {
		return err
	}
	_, err := x.c.semRelease(ctx, x.k, "3", permits)
	return err
}

// Available returns how many permits are free: the total less what live
// holders have. A request for that many or fewer may still wait, behind
// waiters queued before it.
func (s *Semaphore) Available(ctx context.Context) (int64, error) {
	x := s.engine()
	if x.err != nil {
		return 0, x.err
	}
	if err := x.c.checkCall(ctx, "available permits of", x.k.name); err != nil {
		return 0, err
	}
	return x.c.semRelease(ctx, x.k, "4", s.permits)
}

// Delete removes the total stored by SetPermits, and reports whether there
// was one; the permits given to Client.Semaphore are the total again. Holders
// and waiters are not affected. Everything else the semaphore keeps in Redis
// expires by itself once nobody holds it or waits for it, so after Delete a
// semaphore no longer in use leaves nothing behind.
func (s *Semaphore) Delete(ctx context.Context) (bool, error) {
	x := s.engine()
	if x.err != nil {
		return false, x.err
	}
	if err := x.c.checkCall(ctx, "delete", x.k.name); err != nil {
		return false, err
	}
	v, err := x.c.semRelease(ctx, x.k, "5", s.permits)
	return v == 1, err
}

// semRelease runs sem_release.lua in a mode of its own (3: store the total,
// 4: count what is free, 5: remove the stored total) with total as its
// argument: the new total, or the one to use when none is stored. Each call
// has an id of its own, so that a retry of a Delete answers as it did.
func (c *Client) semRelease(ctx context.Context, k keys, mode string, total int64) (int64, error) {
	id := c.newOwner()
	ks := append(k.releaseKeys[:len(k.releaseKeys):len(k.releaseKeys)], k.marker(id))
	v, err := k.kind.release.Run(ctx, c.cmd, ks, id, k.channel, mode, 0, total, markerTTL.Milliseconds()).Int64()
	if err != nil {
		return 0, fmt.Errorf("dlock: semaphore %q: %w", k.name, err)
	}
	return v, nil
}

func (s *Semaphore) engine() *exclusive {
	if s == nil || s.x.c == nil && s.x.err == nil {
		return &exclusive{err: errors.New("dlock: nil or zero Semaphore; get one from Client.Semaphore")}
	}
	return &s.x
}
