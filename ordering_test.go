package dlock_test

// The newest intent wins: a renewal sent before a Lease.Extend, whose reply
// comes late or which Redis runs late (the reply held up, go-redis's retry
// after a read timeout, the body sent after NOSCRIPT), neither lengthens the
// lease in Redis again nor lengthens what the holder counts on; and a
// renewal that Redis runs after the release does not turn a clean Unlock
// into a loss. Each through the fault proxy, against a real server.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRenewalBeforeExtend: a lease of 6 s is renewed after 2 s; that
// renewal R gets no timely answer, is sent again after 1 s and answered;
// then the holder shortens the lease with Extend(1s), and R comes back:
//
//   - "late reply": R's reply arrives while the Extend's is still out (the
//     Extend's reply comes after the shortened lease has run out);
//   - "go-redis retry": R's reply never comes, and go-redis sends R again
//     after its read timeout, after the Extend ran (and once more with the
//     Extend's reply late, so that R's reply comes while it is out);
//   - "EVAL after NOSCRIPT": Redis lost its scripts; R's NOSCRIPT answer
//     comes late, and R's body is sent after the Extend ran.
//
// Whatever the path, Redis frees the lock about 1 s after the Extend, or
// after the holder is cut off from Redis (another owner takes it long before
// the 6 s TTL would have let it), and the lease has ended by the time another
// owner has the lock.
func TestRenewalBeforeExtend(t *testing.T) {
	t.Parallel()
	const (
		ttl   = 6 * time.Second
		short = time.Second
	)
	renewal := faultproxy.And(script("extend"), faultproxy.HasArg("gt"))
	extend := faultproxy.And(script("extend"), faultproxy.HasArg("set"))
	// A lease is carried by a lock hash (Mutex) or by a member of a sorted
	// set of holders (Semaphore, an RWMutex's read hold).
	type kind struct {
		name        string
		lock, other func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error)
	}
	mutex := kind{"Mutex",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.Mutex("x", dlock.WithTTL(ttl)).Lock(ctx)
		},
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.Mutex("x").TryLock(ctx) },
	}
	semaphore := kind{"Semaphore",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.Semaphore("x", 1, dlock.WithTTL(ttl)).Acquire(ctx, 1)
		},
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.Semaphore("x", 1).TryAcquire(ctx, 1)
		},
	}
	reader := kind{"RWMutex read",
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) {
			return c.RWMutex("x", dlock.WithTTL(ttl)).RLock(ctx)
		},
		func(ctx context.Context, c *dlock.Client) (*dlock.Lease, error) { return c.RWMutex("x").TryLock(ctx) },
	}
	for _, tc := range []struct {
		name        string
		kinds       []kind
		readTimeout time.Duration
		// fault makes the first renewal's answer late; flush is set if
		// Redis is to lose its scripts first.
		fault faultproxy.Rule
		flush bool
		// extendFault, if set, holds up the Extend's reply.
		extendFault *faultproxy.Rule
	}{
		{
			name:        "late reply",
			kinds:       []kind{mutex},
			fault:       faultproxy.Rule{Match: renewal, Fault: faultproxy.DelayReply, Delay: 1500 * time.Millisecond, Times: 1},
			extendFault: &faultproxy.Rule{Match: extend, Fault: faultproxy.DelayReply, Delay: 2 * time.Second, Times: 1},
		},
		{
			name:        "go-redis retry",
			kinds:       []kind{mutex, semaphore, reader},
			readTimeout: 1500 * time.Millisecond,
			fault:       faultproxy.Rule{Match: renewal, Fault: faultproxy.SwallowReply, Times: 1},
		},
		{
			// The Extend's reply comes after the shortened lease ran
			// out, shortly before go-redis's read timeout.
			name:        "go-redis retry, Extend's reply late",
			kinds:       []kind{mutex},
			readTimeout: 1500 * time.Millisecond,
			fault:       faultproxy.Rule{Match: renewal, Fault: faultproxy.SwallowReply, Times: 1},
			extendFault: &faultproxy.Rule{Match: extend, Fault: faultproxy.DelayReply, Delay: 1200 * time.Millisecond, Times: 1},
		},
		{
			name:  "EVAL after NOSCRIPT",
			kinds: []kind{mutex, semaphore, reader},
			fault: faultproxy.Rule{Match: faultproxy.And(faultproxy.CommandIs("EVALSHA"), renewal), Fault: faultproxy.DelayReply, Delay: 1500 * time.Millisecond, Times: 1},
			flush: true,
		},
	} {
		for _, k := range tc.kinds {
			t.Run(tc.name+"/"+k.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				srv := redistest.Start(t)
				p := faultproxy.Start(t, srv.Addr)
				direct := srv.Client(t)
				loadScripts(t, direct)
				rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: tc.readTimeout})
				t.Cleanup(func() { rdb.Close() })
				renewed := make(chan struct{}, 1)
				c := clientOn(t, rdb, dlock.WithHooks(dlock.Hooks{
					Extended: func(context.Context, dlock.LockInfo, int64) {
						select {
						case renewed <- struct{}{}:
						default:
						}
					},
				}))
				l, err := k.lock(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				if tc.flush {
					if err := direct.ScriptFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
				in := p.Inject(tc.fault)
				select {
				case <-in.Hit():
				case <-time.After(ttl):
					t.Fatal("no renewal was sent")
				}
				// The renewal sent again, answered.
				select {
				case <-renewed:
				case <-time.After(ttl / 2):
					t.Fatal("the renewal was not sent again")
				}
				if tc.extendFault != nil {
					p.Inject(*tc.extendFault)
				}
				extended := make(chan error, 1)
				go func() { extended <- l.Extend(ctx, short) }()
				if tc.extendFault == nil {
					// The Extend is answered; R reaches Redis again after it.
					// Once it has, the holder is cut off from Redis, so that
					// only what Redis keeps holds the lock.
					if err := <-extended; err != nil {
						t.Fatalf("Extend: %v", err)
					}
					again := p.Inject(faultproxy.Rule{Match: faultproxy.And(renewal, faultproxy.HasArg("6000")), Times: 1})
					select {
					case <-again.Hit():
					case <-time.After(ttl / 2):
						t.Fatal("the first renewal never reached Redis again")
					}
					time.Sleep(50 * time.Millisecond) // for it to run
					p.Refuse(true)
					p.Cut()
					extended <- nil
				}

				// Another owner, straight to Redis, takes the lock once the
				// shortened lease has run out there; by then the lease must
				// have ended. It tries until well before the 6 s TTL, renewed or
				// not, would have let it.
				other := clientOn(t, direct)
				giveUp := time.Now().Add(ttl / 2)
				var o *dlock.Lease
				for o == nil && time.Now().Before(giveUp) {
					if o, err = k.other(ctx, other); err != nil {
						if !errors.Is(err, dlock.ErrNotAcquired) {
							t.Fatal(err)
						}
						o = nil
						time.Sleep(5 * time.Millisecond)
					}
				}
				if o == nil {
					t.Fatalf("another owner could not take the lock for %v after Extend(%v) and the holder's last request", ttl/2, short)
				}
				defer o.Unlock(ctx)
				// Done closes at the local deadline, ahead of Redis's expiry;
				// allow for a late timer.
				if !closedWithin(l.Done(), 100*time.Millisecond) {
					t.Errorf("another owner has the lock (fence %d) while the lease (fence %d) is still held", o.Fence(), l.Fence())
				}
				select {
				case err := <-extended:
					if tc.extendFault != nil && !errors.Is(err, dlock.ErrLockLost) {
						t.Errorf("Extend, whose reply came after the shortened lease ran out: %v, want ErrLockLost", err)
					}
					if tc.extendFault == nil && err != nil {
						t.Errorf("Extend: %v", err)
					}
				case <-time.After(5 * time.Second):
					t.Error("Extend did not return")
				}
				if !errors.Is(l.Err(), dlock.ErrLockLost) {
					t.Errorf("Err = %v, want ErrLockLost", l.Err())
				}
				checkHit(t, in)
				t.Logf("the lease ended with: %v", l.Err())
			})
		}
	}
}

// TestRenewalAfterRelease: a renewal held up on its way reaches Redis after
// the Unlock's release has freed the lock, and its answer ("nobody holds
// it") comes back before the release's: the Unlock still reads as one, with
// no loss reported.
func TestRenewalAfterRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var lost atomic.Int32
	c, p, rdb := proxied(t, dlock.WithHooks(dlock.Hooks{
		Lost: func(context.Context, dlock.LockInfo, int64, error) { lost.Add(1) },
	}))
	const ttl = 3 * time.Second
	l, err := c.Mutex("x", dlock.WithTTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	renewal := p.Inject(faultproxy.Rule{Match: script("extend"), Fault: faultproxy.DelayRequest, Delay: 300 * time.Millisecond, Times: 1})
	select {
	case <-renewal.Hit():
	case <-time.After(ttl):
		t.Fatal("no renewal was sent")
	}
	release := p.Inject(faultproxy.Rule{Match: script("release"), Fault: faultproxy.DelayReply, Delay: 800 * time.Millisecond, Times: 1})
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	checkHit(t, release)
	if err := freedErr(rdb, "dlock:{x}", ttl); err != nil {
		t.Errorf("the lock is still in Redis after Unlock: %v", err)
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Err after a clean Unlock = %v, want ErrNotHeld and not ErrLockLost", err)
	}
	if n := lost.Load(); n != 0 {
		t.Errorf("the Lost hook ran %d times for a lease unlocked cleanly", n)
	}
}
