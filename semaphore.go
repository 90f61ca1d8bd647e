package dlock

import (
	"context"
	"errors"
	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
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
// back, once, even when go-redis runs it again after a lost reply: then Redis
// finds nothing left to give back, and Release succeeds if that answer comes
// before the lease's local deadline (until which the lease cannot have
// lapsed); after it, or when Redis has lost the semaphore's keys, the error
// matches ErrLockLost and says that it may be a false alarm. Each
// acquisition is a new holder: there is no re-entry, and a Lease's context
// does not make a later Acquire share its permits. The zero Semaphore is not
// usable; get one from Client.Semaphore.
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
// ends leaves the queue at once; one whose process died lapses (see Times in
// the package documentation).
//
// The total: SetPermits stores one in Redis, which lasts until Delete removes
// it. While none is stored, the permits given to Client.Semaphore are the
// total; the first acquisition keeps its number with the semaphore's other
// state for as long as the semaphore is in use (held or waited for), and
// later callers use that. Lowering the total below what is held takes effect
// as holders release.
type Semaphore struct {
	a       acquirer
	permits int64
}

// maxPermits is the most permits a Semaphore may have: Redis's scripts count
// exactly up to 2^53.
const maxPermits = 1 << 53

// Semaphore returns the semaphore called name, with permits permits if Redis
// holds no total for it yet. Any byte string is a valid name; the empty one is
// not, and neither is permits below 1 (or above 2^53) or an invalid option:
// those errors are returned by every call. A Semaphore's keys do not collide
// with those of a Mutex of the same name.
func (c *Client) Semaphore(name string, permits int64, opts ...Option) *Semaphore {
	s := &Semaphore{a: c.acquirer(protocol.SemKind, name, opts), permits: permits}
	if s.a.err == nil && (permits < 1 || permits > maxPermits) {
		s.a.err = errs.Op(nil, nil, "Semaphore %q: %d permits: want at least 1 and at most 2^53", name, permits)
	}
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.acquirer().k.Name }

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
	a := s.acquirer()
	if a.err == nil && n < 1 {
		return nil, errs.Op(nil, nil, "%s %d permits of %q: want at least 1", op, n, a.k.Name)
	}
	l, err := a.acquire(ctx, op, wait, []any{n, s.defaultTotal()})
	if err == errTooMany {
		return nil, errs.Op(ErrNotAcquired, nil, "%s %d permits of %q: more than the semaphore's total", op, n, a.k.Name)
	}
	return l, err
}

// SetPermits sets the semaphore's total to permits for every process that
// uses its name, at once: Redis keeps it until Delete removes it, and it
// counts instead of the permits each process gave Client.Semaphore. The
// waiters that fit under the new total are woken. Lowering the total below
// the permits in use takes none back: the holders keep theirs, and nobody
// gets any until fewer than the new total are in use. permits below 1 (or
// above 2^53) is an error, and nothing is written.
//
// A SetPermits that go-redis runs again after a lost reply changes nothing
// more: a total another call set or removed meanwhile stays. (Redis keeps
// the ids of the latest calls for this, in the semaphore's hash, for at least
// 10s after the latest.) On a RedLock Client it returns an error matching
// errors.ErrUnsupported.
func (s *Semaphore) SetPermits(ctx context.Context, permits int64) error {
	a := s.acquirer()
	if a.err != nil {
		return a.err
	}
	if permits < 1 || permits > maxPermits {
		return errs.Op(nil, nil, "set %d permits of %q: want at least 1 and at most 2^53", permits, a.k.Name)
	}
	_, err := s.call(ctx, "set permits of", protocol.SemSetTotal, permits)
	return err
}

// Available returns how many permits are free: the total less what live
// holders have. A request for that many or fewer may still wait, behind
// waiters queued before it.
func (s *Semaphore) Available(ctx context.Context) (int64, error) {
	return s.call(ctx, "available permits of", protocol.SemAvailable, s.defaultTotal())
}

// Delete removes the total stored by SetPermits, and reports whether there
// was one; the permits given to Client.Semaphore are the total again. Holders
// and waiters are not affected. Everything else the semaphore keeps in Redis
// expires by itself once nobody holds it or waits for it (and at least 10s
// after a Delete that removed a total, or a SetPermits, which it keeps the
// call's id for), so after Delete a semaphore no longer in use leaves nothing
// behind.
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
	return a.e.backend.Semaphore(ctx, a.k, a.e.newOwner(), mode, total)
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
