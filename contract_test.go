package dlock_test

// The lease contract: what every handle an acquire returns promises,
// whatever it holds (a Mutex's, FairMutex's, RWMutex's read or write hold,
// a Semaphore's permits, an Election's leadership, a MultiLock's names, a
// RedLock's Mutex). TestLeaseContract runs each promise over each kind of
// the table below; what only one kind promises (waiting order, readers
// sharing, permits, terms and values) is tested beside that kind.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// handle is what every acquire returns, as the contract takes it: a
// *dlock.Lease, a *dlock.Leadership (whose Unlock is Resign and whose fence
// is its Term) or a *dlock.MultiLease (a fence per name).
type handle interface {
	Unlock(context.Context) error
	Fences() []int64
	Done() <-chan struct{}
	Err() error
	Context(context.Context) (context.Context, context.CancelFunc)
}

// extender is what a handle whose lease can be extended has besides: every
// kind's but a Leadership's.
type extender interface {
	Extend(context.Context, time.Duration) error
	TTL(context.Context) (time.Duration, error)
}

type leaseHandle struct{ *dlock.Lease }

func (h leaseHandle) Fences() []int64 { return []int64{h.Fence()} }

type leadershipHandle struct{ *dlock.Leadership }

func (h leadershipHandle) Unlock(ctx context.Context) error { return h.Resign(ctx) }
func (h leadershipHandle) Fences() []int64                  { return []int64{h.Term()} }

type multiHandle struct{ *dlock.MultiLease }

// TTL is the shortest TTL of the MultiLease's leases.
func (h multiHandle) TTL(ctx context.Context) (time.Duration, error) {
	leases := h.Leases()
	if len(leases) == 0 {
		return 0, errors.New("a MultiLease without leases")
	}
	least := time.Duration(-1)
	for _, l := range leases {
		left, err := l.TTL(ctx)
		if err != nil {
			return 0, err
		}
		if least < 0 || left < least {
			least = left
		}
	}
	return least, nil
}

func asLease(l *dlock.Lease, err error) (handle, error) {
	if err != nil {
		return nil, err
	}
	return leaseHandle{l}, nil
}

func asLeadership(ld *dlock.Leadership, err error) (handle, error) {
	if err != nil {
		return nil, err
	}
	return leadershipHandle{ld}, nil
}

func asMulti(l *dlock.MultiLease, err error) (handle, error) {
	if err != nil {
		return nil, err
	}
	return multiHandle{l}, nil
}

// contractKind is a kind of lock as the contract takes it.
type contractKind struct {
	name string
	// members is how many servers the kind's Clients use: 1, or a
	// RedLock's members (the full tier's).
	members int
	// lock acquires name on c, waiting.
	lock func(ctx context.Context, c *dlock.Client, name string, opts ...dlock.Option) (handle, error)
	// rival is another owner's acquire of what lock holds of the lock
	// called name (one of names), a try or a waiting one: lock's hold
	// refuses it.
	rival func(ctx context.Context, c *dlock.Client, name string, try bool) (handle, error)
	// names are the locks lock takes for name; the last is the one the
	// rival takes and the loss promises take away. Nil: name alone.
	names func(name string) []string
	// lose takes the hold away as an expiry would (dlocktest.Lose); nil
	// where dlocktest cannot.
	lose func(t *testing.T, h handle)
	// freed checks that the lock called name is left free in Redis, its
	// state expiring within lease; nil where the kind's own tests check its
	// keys (TestRWMutex, TestSemaphore).
	freed func(e *contractEnv, name string, lease time.Duration) error
	// zeros are nil and zero handles of the kind's type.
	zeros []handle
	// reenters: an acquire with the handle's Context re-enters its hold.
	reenters bool
	// extends: the handle is an extender.
	extends bool
	// fixed: the kind takes WithoutRenewal.
	fixed bool
	// resignAgain: a second Unlock reports the first one's outcome (nil)
	// rather than ErrNotHeld, as Leadership.Resign's doc has it.
	resignAgain bool
	// noScripts: the kind's Clients are made with WithoutScripts, on a
	// server that runs it (Valkey 9.0 or later; plainServer).
	noScripts bool
}

func (k contractKind) lockNames(name string) []string {
	if k.names == nil {
		return []string{name}
	}
	return k.names(name)
}

// lost is the lock the rival takes and the loss promises take away.
func (k contractKind) lost(name string) string {
	ns := k.lockNames(name)
	return ns[len(ns)-1]
}

func loseLease(t *testing.T, h handle) { dlocktest.Lose(t, h.(leaseHandle).Lease) }

// tryFor is how long a rival Campaign, which has no try, waits to be
// refused.
const tryFor = 300 * time.Millisecond

var contractKinds = []contractKind{
	{name: "Mutex", members: 1, reenters: true, extends: true, fixed: true, lose: loseLease,
		lock: func(ctx context.Context, c *dlock.Client, n string, opts ...dlock.Option) (handle, error) {
			return asLease(c.Mutex(n, opts...).Lock(ctx))
		},
		rival: mutexRival,
		freed: freedAt("dlock:{%s}"),
		zeros: []handle{leaseHandle{nil}, leaseHandle{&dlock.Lease{}}}},
	{name: "FairMutex", members: 1, reenters: true, extends: true, fixed: true, lose: loseLease,
		lock: func(ctx context.Context, c *dlock.Client, n string, opts ...dlock.Option) (handle, error) {
			return asLease(c.FairMutex(n, opts...).Lock(ctx))
		},
		rival: func(ctx context.Context, c *dlock.Client, n string, try bool) (handle, error) {
			if try {
				return asLease(c.FairMutex(n).TryLock(ctx))
			}
			return asLease(c.FairMutex(n).Lock(ctx))
		},
		freed: freedAt("dlock:fair:{%s}")},
	{name: "RWMutex read", members: 1, reenters: true, extends: true, fixed: true, lose: loseLease,
		lock: func(ctx context.Context, c *dlock.Client, n string, opts ...dlock.Option) (handle, error) {
			return asLease(c.RWMutex(n, opts...).RLock(ctx))
		},
		rival: rwWriterRival},
	{name: "RWMutex write", members: 1, reenters: true, extends: true, fixed: true, lose: loseLease,
		lock: func(ctx context.Context, c *dlock.Client, n string, opts ...dlock.Option) (handle, error) {
			return asLease(c.RWMutex(n, opts...).Lock(ctx))
		},
		rival: rwWriterRival},
	{name: "Semaphore", members: 1, extends: true, fixed: true, lose: loseLease,
		lock: func(ctx context.Context, c *dlock.Client, n string, opts ...dlock.Option) (handle, error) {
			return asLease(c.Semaphore(n, 1, opts...).Acquire(ctx, 1))
		},
		rival: func(ctx context.Context, c *dlock.Client, n string, try bool) (handle, error) {
			if try {
				return asLease(c.Semaphore(n, 1).TryAcquire(ctx, 1))
			}
			return asLease(c.Semaphore(n, 1).Acquire(ctx, 1))
		}},
	{name: "Election", members: 1, resignAgain: true,
		lock: func(ctx context.Context, c *dlock.Client, n string, opts ...dlock.Option) (handle, error) {
			return asLeadership(c.Election(n, opts...).Campaign(ctx, "v"))
		},
		rival: func(ctx context.Context, c *dlock.Client, n string, try bool) (handle, error) {
			if try {
				cctx, cancel := context.WithTimeout(ctx, tryFor)
				defer cancel()
				return asLeadership(c.Election(n).Campaign(cctx, "rival"))
			}
			return asLeadership(c.Election(n).Campaign(ctx, "rival"))
		},
		lose:  func(t *testing.T, h handle) { dlocktest.Lose(t, h.(leadershipHandle).Leadership) },
		freed: freedAt("dlock:election:{%s}"),
		zeros: []handle{leadershipHandle{nil}, leadershipHandle{&dlock.Leadership{}}}},
	{name: "MultiLock", members: 1, reenters: true, extends: true, fixed: true,
		lock: func(ctx context.Context, c *dlock.Client, n string, opts ...dlock.Option) (handle, error) {
			return asMulti(c.MultiLock([]string{n, n + "-b"}, opts...).Lock(ctx))
		},
		names: func(n string) []string { return []string{n, n + "-b"} },
		// Another owner takes one of the names.
		rival: mutexRival,
		freed: freedAt("dlock:{%s}"),
		lose:  func(t *testing.T, h handle) { dlocktest.Lose(t, h.(multiHandle).Leases()[1]) },
		zeros: []handle{multiHandle{nil}, multiHandle{&dlock.MultiLease{}}}},
	// A Mutex without scripts. dlocktest.Lose does not take its leases:
	// "taken" takes them away.
	{name: "Mutex WithoutScripts", members: 1, reenters: true, extends: true, fixed: true, noScripts: true,
		lock: func(ctx context.Context, c *dlock.Client, n string, opts ...dlock.Option) (handle, error) {
			return asLease(c.Mutex(n, opts...).Lock(ctx))
		},
		rival: mutexRival,
		freed: freedAt("dlock:{%s}")},
	// A RedLock's Mutex, on three members. dlocktest.Lose does not take
	// RedLock leases; "taken" takes them away.
	{name: "RedLock Mutex", members: 3, reenters: true, extends: true, fixed: true,
		lock: func(ctx context.Context, c *dlock.Client, n string, opts ...dlock.Option) (handle, error) {
			return asLease(c.Mutex(n, opts...).Lock(ctx))
		},
		rival: mutexRival,
		// Unlock returns once a majority has released; a member that
		// answers late releases in the background.
		freed: func(e *contractEnv, n string, _ time.Duration) error {
			if !within(2*time.Second, func() bool { return holders(e.t, e.rdbs, n) == 0 }) {
				return fmt.Errorf("%q held on %d members", n, holders(e.t, e.rdbs, n))
			}
			return nil
		}},
}

// freedAt is the freed check of a kind whose lock state is one key, of the
// layout given with %s for the name (lockState).
func freedAt(layout string) func(e *contractEnv, name string, lease time.Duration) error {
	return func(e *contractEnv, name string, lease time.Duration) error {
		return freedErr(e.rdbs[0], fmt.Sprintf(layout, name), lease)
	}
}

// checkFreed checks, where the kind can, that each of name's locks but
// except is left free in Redis, expiring within lease.
func (e *contractEnv) checkFreed(t *testing.T, name, except string, lease time.Duration) {
	t.Helper()
	if e.k.freed == nil {
		return
	}
	for _, n := range e.k.lockNames(name) {
		if n == except {
			continue
		}
		if err := e.k.freed(e, n, lease); err != nil {
			t.Errorf("not freed: %v", err)
		}
	}
}

func mutexRival(ctx context.Context, c *dlock.Client, n string, try bool) (handle, error) {
	if try {
		return asLease(c.Mutex(n).TryLock(ctx))
	}
	return asLease(c.Mutex(n).Lock(ctx))
}

// rwWriterRival is a writer: a read or a write hold refuses it.
func rwWriterRival(ctx context.Context, c *dlock.Client, n string, try bool) (handle, error) {
	if try {
		return asLease(c.RWMutex(n).TryLock(ctx))
	}
	return asLease(c.RWMutex(n).Lock(ctx))
}

// contractEnv is a kind's world: its servers, a Client whose hooks count
// renewals and losses per lock name, and another owner's Client.
type contractEnv struct {
	t         *testing.T
	k         contractKind
	rdbs      []*redis.Client // the server, or a RedLock's members
	c, other  *dlock.Client
	newClient func(t *testing.T, opts ...dlock.Option) *dlock.Client
	renewals  hookCounts
	losses    hookCounts
}

// hookCounts counts a hook's calls per lock name.
type hookCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *hookCounts) add(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[name]++
}

func (h *hookCounts) get(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[name]
}

func newContractEnv(t *testing.T, k contractKind) *contractEnv {
	t.Helper()
	e := &contractEnv{t: t, k: k}
	switch {
	case k.noScripts:
		srv, admin, _, password := plainServer(t)
		e.rdbs = []*redis.Client{admin}
		e.newClient = func(t *testing.T, opts ...dlock.Option) *dlock.Client { return plainClient(t, srv, password, opts...) }
	case k.members == 1:
		rdb := redistest.Start(t).Client(t)
		e.rdbs = []*redis.Client{rdb}
		e.newClient = func(t *testing.T, opts ...dlock.Option) *dlock.Client { return clientOn(t, rdb, opts...) }
	default:
		_, e.rdbs = redLockNodes(t, k.members)
		e.newClient = func(t *testing.T, opts ...dlock.Option) *dlock.Client { return redLockOn(t, e.rdbs, opts...) }
	}
	e.c = e.newClient(t, dlock.WithHooks(dlock.Hooks{
		Extended: func(_ context.Context, l dlock.LockInfo, _ int64) { e.renewals.add(l.Name) },
		Lost:     func(_ context.Context, l dlock.LockInfo, _ int64, _ error) { e.losses.add(l.Name) },
	}))
	e.other = e.newClient(t)
	return e
}

// lock acquires name on c, failing the test if it cannot.
func (e *contractEnv) lock(t *testing.T, c *dlock.Client, name string, opts ...dlock.Option) handle {
	t.Helper()
	h, err := e.k.lock(context.Background(), c, name, opts...)
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	return h
}

// rivalTakes has another owner take what name's hold held, at once: it must
// be free.
func (e *contractEnv) rivalTakes(t *testing.T, name string) handle {
	t.Helper()
	r, err := e.k.rival(context.Background(), e.other, name, true)
	if err != nil {
		t.Fatalf("another owner's try of %q: %v, want it free", name, err)
	}
	return r
}

// rivalRefused checks that another owner's try of name is refused.
func (e *contractEnv) rivalRefused(t *testing.T, name string) {
	t.Helper()
	r, err := e.k.rival(context.Background(), e.other, name, true)
	if err == nil {
		_ = r.Unlock(context.Background())
		t.Fatalf("another owner took %q beside the hold", name)
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("another owner's try of %q: %v, want ErrNotAcquired", name, err)
	}
	if e.k.name == "Election" {
		// A campaign that gave up leaves the line in the background: until
		// it has, a Resign grants it the term, which its leaving passes on.
		ctx := context.Background()
		if !within(5*time.Second, func() bool {
			st, err := e.c.Inspect(ctx, dlock.KindElection, name)
			return err == nil && st.Queued == 0
		}) {
			t.Fatalf("the campaign that gave up on %q is still in line", name)
		}
	}
}

// deleteKeys deletes every key of the lock called name on every member, as
// a Redis that lost its data would.
func (e *contractEnv) deleteKeys(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	for _, rdb := range e.rdbs {
		keys, err := rdb.Keys(ctx, "*{"+name+"}*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 0 {
			if err := rdb.Del(ctx, keys...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func mustUnlock(t *testing.T, h handle) {
	t.Helper()
	if err := h.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}

// rises checks that every fence of next is above the same lock's in last.
func rises(t *testing.T, last, next []int64) {
	t.Helper()
	for i, f := range next {
		if f <= 0 || i < len(last) && f <= last[i] {
			t.Fatalf("fences %v after %v: want each above the last", next, last)
		}
	}
}

// contractPromises are the promises, each run on a name of its own.
// A promise that does not apply to a kind says where that kind's own
// behaviour is tested.
var contractPromises = []struct {
	name    string
	applies func(k contractKind) bool // nil: every kind
	run     func(t *testing.T, e *contractEnv, name string)
}{
	{"Unlock", nil, promiseUnlock},
	{"UnlockCancelledCtx", nil, promiseUnlockCancelled},
	{"FenceRises", nil, promiseFence},
	{"Context", nil, promiseContext},
	// Campaign while leading (TestElectionCampaignWhileLeading) and a
	// Semaphore's Acquire take no re-entry.
	{"Reentry", func(k contractKind) bool { return k.reenters }, promiseReentry},
	// dlocktest.Lose takes no RedLock lease: Taken takes it away.
	{"Lose", func(k contractKind) bool { return k.lose != nil }, promiseLose},
	{"Taken", nil, promiseTaken},
	{"Renewal", nil, promiseRenewal},
	// A Leadership is renewed, never extended.
	{"Extend", func(k contractKind) bool { return k.extends }, promiseExtend},
	// An Election refuses WithoutRenewal (TestElectionBadInput).
	{"FixedLease", func(k contractKind) bool { return k.fixed }, promiseFixed},
	{"Close", nil, promiseClose},
	// A RedLock's Mutex hands out the Mutex's *Lease.
	{"NilAndZero", func(k contractKind) bool { return len(k.zeros) > 0 }, promiseNil},
}

// TestLeaseContract runs every promise of the lease contract over every
// kind of lock.
func TestLeaseContract(t *testing.T) {
	t.Parallel()
	for _, k := range contractKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, k)
			for _, p := range contractPromises {
				if p.applies == nil || p.applies(k) {
					t.Run(p.name, func(t *testing.T) { p.run(t, e, p.name) })
				}
			}
		})
	}
}

// promiseUnlock: a hold refuses another owner; Unlock returns nil once,
// frees what it held in Redis (its state expiring within the lease) and
// ends the hold (Done closed, Err matching ErrNotHeld); a second Unlock changes nothing and returns an error matching
// ErrNotHeld (a second Resign reports the first one's outcome).
func promiseUnlock(t *testing.T, e *contractEnv, name string) {
	ctx := context.Background()
	h := e.lock(t, e.c, name)
	if err := h.Err(); err != nil {
		t.Errorf("Err while held: %v", err)
	}
	if isClosed(h.Done()) {
		t.Error("Done closed while held")
	}
	e.rivalRefused(t, e.k.lost(name))
	mustUnlock(t, h)
	e.checkFreed(t, name, "", dlock.DefaultTTL)
	if !closedWithin(h.Done(), time.Second) || !errors.Is(h.Err(), dlock.ErrNotHeld) {
		t.Errorf("after Unlock: Err %v, want Done closed and ErrNotHeld", h.Err())
	}
	err := h.Unlock(ctx)
	switch {
	case e.k.resignAgain && err != nil:
		t.Errorf("second Resign: %v, want the first one's outcome, nil", err)
	case !e.k.resignAgain && !errors.Is(err, dlock.ErrNotHeld):
		t.Errorf("second Unlock: %v, want ErrNotHeld", err)
	}
	mustUnlock(t, e.rivalTakes(t, e.k.lost(name)))
}

// promiseUnlockCancelled: Unlock works with a cancelled context, as
// cleanup in a defer after the caller's context ended: the lock is freed.
func promiseUnlockCancelled(t *testing.T, e *contractEnv, name string) {
	h := e.lock(t, e.c, name)
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.Unlock(cctx); err != nil {
		t.Fatalf("Unlock with a cancelled context: %v", err)
	}
	e.checkFreed(t, name, "", dlock.DefaultTTL)
	mustUnlock(t, e.rivalTakes(t, e.k.lost(name)))
}

// promiseFence: fences rise strictly across holders and Clients, and after
// Redis lost the name's keys.
func promiseFence(t *testing.T, e *contractEnv, name string) {
	var last []int64
	for i := range 4 {
		h := e.lock(t, []*dlock.Client{e.c, e.other}[i%2], name)
		rises(t, last, h.Fences())
		last = h.Fences()
		mustUnlock(t, h)
	}
	for _, n := range e.k.lockNames(name) {
		e.deleteKeys(t, n)
	}
	h := e.lock(t, e.c, name)
	rises(t, last, h.Fences())
	mustUnlock(t, h)
}

// promiseContext: the handle's Context lives while the hold does (its
// cancel ends the context, not the hold; a nil parent is Background), and
// ends, and what derives from it, with Unlock's cause.
func promiseContext(t *testing.T, e *contractEnv, name string) {
	ctx := context.Background()
	h := e.lock(t, e.c, name)
	lctx, cancel := h.Context(ctx)
	if lctx.Err() != nil {
		t.Fatalf("the context of a held lock ended: %v", context.Cause(lctx))
	}
	cancel()
	if lctx.Err() == nil || h.Err() != nil {
		t.Errorf("after the context's cancel: context %v, hold %v; want the context ended, the hold not", lctx.Err(), h.Err())
	}
	lctx, cancel = h.Context(nil) //nolint:staticcheck // a nil parent is documented as Background
	defer cancel()
	derived, dcancel := context.WithCancel(lctx)
	defer dcancel()
	if lctx.Err() != nil {
		t.Fatalf("the context with a nil parent ended: %v", context.Cause(lctx))
	}
	mustUnlock(t, h)
	if !closedWithin(lctx.Done(), time.Second) || !errors.Is(context.Cause(lctx), dlock.ErrNotHeld) {
		t.Errorf("after Unlock the context's cause is %v, want ErrNotHeld", context.Cause(lctx))
	}
	if !closedWithin(derived.Done(), time.Second) {
		t.Error("a context derived from the hold's did not end with it")
	}
}

// promiseReentry: an acquire with the handle's Context re-enters the hold,
// with its fences; the re-entry's Unlock leaves the hold held, the last
// Unlock frees it.
func promiseReentry(t *testing.T, e *contractEnv, name string) {
	ctx := context.Background()
	h := e.lock(t, e.c, name)
	lctx, cancel := h.Context(ctx)
	defer cancel()
	inner, err := e.k.lock(lctx, e.c, name)
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if !slices.Equal(inner.Fences(), h.Fences()) {
		t.Errorf("re-entry fences %v, want the hold's %v", inner.Fences(), h.Fences())
	}
	mustUnlock(t, inner)
	if err := inner.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("second Unlock of the re-entry: %v, want ErrNotHeld", err)
	}
	if h.Err() != nil {
		t.Fatalf("the hold ended with its re-entry: %v", h.Err())
	}
	e.rivalRefused(t, e.k.lost(name))
	mustUnlock(t, h)
	mustUnlock(t, e.rivalTakes(t, e.k.lost(name)))
}

// promiseLose: a hold lost as an expiry would lose it (dlocktest.Lose)
// ends: Err and the Context's cause match ErrLockLost, Extend and a
// re-entry fail, the Lost hook runs once; another owner may take it; the
// loser's Unlock says it was lost and leaves the new owner alone.
func promiseLose(t *testing.T, e *contractEnv, name string) {
	h := e.lock(t, e.c, name)
	lctx, cancel := h.Context(context.Background())
	defer cancel()
	e.k.lose(t, h)
	checkLost(t, e, name, h, lctx)
}

// promiseTaken: a hold whose keys Redis lost, and that another owner then
// takes, is lost within a renewal period of it, with the same signals as
// promiseLose's. On a RedLock the keys go on every member (a renewal takes
// a member's lock again where it is free: DECISIONS §9).
func promiseTaken(t *testing.T, e *contractEnv, name string) {
	const ttl = 600 * time.Millisecond
	h := e.lock(t, e.c, name, dlock.WithTTL(ttl))
	lctx, cancel := h.Context(context.Background())
	defer cancel()
	lost := e.k.lost(name)
	e.deleteKeys(t, lost)
	taken := time.Now()
	r := e.rivalTakes(t, lost)
	defer func() { _ = r.Unlock(context.Background()) }()
	if !closedWithin(h.Done(), ttl/3+200*time.Millisecond) {
		t.Fatal("Done not closed within a renewal period of the takeover")
	}
	t.Logf("loss seen %v after the takeover", time.Since(taken))
	checkLost(t, e, name, h, lctx, r)
}

// checkLost checks what a lost hold h promises; taken, if given, is the
// new owner's hold, else the rival takes the lock.
func checkLost(t *testing.T, e *contractEnv, name string, h handle, lctx context.Context, taken ...handle) {
	t.Helper()
	ctx := context.Background()
	lost := e.k.lost(name)
	if !closedWithin(h.Done(), time.Second) {
		t.Fatal("Done not closed after the loss")
	}
	if err := h.Err(); !errors.Is(err, dlock.ErrLockLost) || !containsName(err, lost) {
		t.Errorf("Err = %v, want ErrLockLost of %q", err, lost)
	}
	if !closedWithin(lctx.Done(), time.Second) || !errors.Is(context.Cause(lctx), dlock.ErrLockLost) {
		t.Errorf("the hold's context: cause %v, want ErrLockLost", context.Cause(lctx))
	}
	if x, ok := h.(extender); ok {
		if err := x.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
			t.Errorf("Extend after the loss: %v, want ErrNotHeld", err)
		}
	}
	if e.k.reenters {
		if _, err := e.k.lock(lctx, e.c, name); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, dlock.ErrLockLost) {
			t.Errorf("re-entry with a lost hold's context: %v, want ErrNotAcquired and ErrLockLost", err)
		}
	}
	if len(taken) == 0 {
		r := e.rivalTakes(t, lost)
		defer func() { _ = r.Unlock(ctx) }()
	}
	if err := h.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock after the loss: %v, want ErrNotHeld and ErrLockLost", err)
	}
	if !errors.Is(h.Err(), dlock.ErrLockLost) {
		t.Errorf("Err after Unlock = %v, want still ErrLockLost", h.Err())
	}
	e.checkFreed(t, name, lost, dlock.DefaultTTL) // a MultiLease's other names
	e.rivalRefused(t, lost)                       // the loser's Unlock left the new owner's hold alone
	// Hooks run off the renewer's goroutine: the Lost hook may run a moment
	// after Done closes.
	if !within(time.Second, func() bool { return e.losses.get(lost) == 1 }) || e.losses.get(lost) != 1 {
		t.Errorf("Lost hook called %d times for %q, want 1", e.losses.get(lost), lost)
	}
}

// containsName reports whether err's text names the lock called name.
func containsName(err error, name string) bool {
	return err != nil && strings.Contains(err.Error(), strconv.Quote(name))
}

// promiseRenewal: a hold of a short TTL is kept alive by renewal for
// several times its TTL, renewed every TTL/3 (or up to TTL/6 early), its
// lock's TTL in Redis within it; renewal stops at Unlock. (A Mutex of
// MinTTL: TestMinTTLRenewed, alone, before the parallel tests.)
func promiseRenewal(t *testing.T, e *contractEnv, name string) {
	const ttl = 600 * time.Millisecond
	h := e.lock(t, e.c, name, dlock.WithTTL(ttl))
	if closedWithin(h.Done(), 3*ttl) {
		t.Fatalf("hold of TTL %v lost while renewed: %v", ttl, h.Err())
	}
	e.rivalRefused(t, e.k.lost(name))
	if x, ok := h.(extender); ok {
		if left, err := x.TTL(context.Background()); err != nil || left <= 0 || left > ttl {
			t.Errorf("TTL = %v, %v; want in (0, %v]", left, err, ttl)
		}
	}
	// 3 TTLs hold 4 to 18 renewals.
	if n := e.renewals.get(name); n < 4 || n > 18 {
		t.Errorf("%d renewals in 3 TTLs, want about 9", n)
	}
	mustUnlock(t, h)
	n := e.renewals.get(name)
	time.Sleep(ttl)
	if e.renewals.get(name) != n {
		t.Error("renewal went on after Unlock")
	}
}

// promiseExtend: Extend sets the TTL, which renewals then keep; a TTL
// below MinTTL is refused; after Unlock, Extend and TTL say ErrNotHeld.
func promiseExtend(t *testing.T, e *contractEnv, name string) {
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	h := e.lock(t, e.c, name, dlock.WithTTL(ttl))
	x := h.(extender)
	if err := x.Extend(ctx, dlock.MinTTL-time.Millisecond); err == nil {
		t.Error("Extend below MinTTL: no error")
	}
	if err := x.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if left, err := x.TTL(ctx); err != nil || left < 9*time.Second {
		t.Errorf("TTL after Extend(10s) = %v, %v", left, err)
	}
	time.Sleep(ttl) // renewals now keep the extended TTL
	if left, err := x.TTL(ctx); err != nil || left < 9*time.Second {
		t.Errorf("TTL after a renewal that followed Extend(10s) = %v, %v", left, err)
	}
	mustUnlock(t, h)
	// The lease was last set to 10s: the freed lock lives no longer.
	e.checkFreed(t, name, "", 10*time.Second)
	if err := x.Extend(ctx, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Extend after Unlock: %v, want ErrNotHeld", err)
	}
	if _, err := x.TTL(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("TTL after Unlock: %v, want ErrNotHeld", err)
	}
	mustUnlock(t, e.rivalTakes(t, e.k.lost(name)))
}

// promiseFixed: a hold WithoutRenewal ends at its TTL, not before, as lost;
// another owner waiting gets it then, with a higher fence; the loser's
// Unlock says lost. Extend gives a fixed hold more time.
func promiseFixed(t *testing.T, e *contractEnv, name string) {
	ctx := context.Background()
	const ttl = 200 * time.Millisecond
	lost := e.k.lost(name)
	start := time.Now()
	h := e.lock(t, e.c, name, dlock.WithTTL(ttl), dlock.WithoutRenewal())
	type result struct {
		h   handle
		err error
	}
	got := make(chan result, 1)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	go func() {
		r, err := e.k.rival(wctx, e.other, lost, false)
		got <- result{r, err}
	}()
	if !closedWithin(h.Done(), 2*ttl) {
		t.Fatal("fixed hold did not end")
	}
	if took := time.Since(start); took < ttl-drift(ttl) {
		t.Errorf("fixed hold ended after %v, before its TTL %v", took, ttl)
	}
	if !errors.Is(h.Err(), dlock.ErrLockLost) {
		t.Errorf("Err = %v, want ErrLockLost", h.Err())
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("another owner waiting for the fixed hold: %v", r.err)
	}
	if took := time.Since(start); took > ttl+300*time.Millisecond {
		t.Errorf("another owner got in %v after a fixed hold of %v", took, ttl)
	}
	if f, hf := r.h.Fences()[0], h.Fences(); f <= hf[len(hf)-1] {
		t.Errorf("fence %d after an expired hold's %d", f, hf[len(hf)-1])
	}
	if err := h.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) || !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("Unlock after the fixed hold ran out: %v, want ErrNotHeld and ErrLockLost", err)
	}
	mustUnlock(t, r.h)

	h = e.lock(t, e.c, name, dlock.WithTTL(ttl), dlock.WithoutRenewal())
	if err := h.(extender).Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if closedWithin(h.Done(), 2*ttl) {
		t.Fatalf("extended fixed hold ended early: %v", h.Err())
	}
	mustUnlock(t, h)
}

// promiseClose: a Client's Close ends its holds (Err matching ErrClosed)
// and frees them in Redis; a waiting acquire returns ErrClosed, and so do
// an acquire and a try after Close; Unlock after Close says ErrNotHeld; a
// second Close is nil.
func promiseClose(t *testing.T, e *contractEnv, name string) {
	ctx := context.Background()
	c := e.newClient(t)
	h := e.lock(t, c, name)
	busy := name + "-busy"
	b, err := e.k.rival(ctx, e.other, e.k.lost(busy), true)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Unlock(ctx) }()
	waitErr := make(chan error, 1)
	go func() {
		_, err := e.k.lock(ctx, c, busy)
		waitErr <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it start waiting
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := <-waitErr; !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("waiting acquire at Close: %v, want ErrClosed", err)
	}
	if !closedWithin(h.Done(), time.Second) || !errors.Is(h.Err(), dlock.ErrClosed) {
		t.Errorf("hold after Close: Err %v, want ErrClosed", h.Err())
	}
	e.checkFreed(t, name, "", dlock.DefaultTTL)
	mustUnlock(t, e.rivalTakes(t, e.k.lost(name)))
	if _, err := e.k.lock(ctx, c, name); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("acquire after Close: %v, want ErrClosed", err)
	}
	if _, err := e.k.rival(ctx, c, name, true); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("a try after Close: %v, want ErrClosed", err)
	}
	if err := h.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock after Close: %v, want ErrNotHeld", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// promiseNil: nil and zero handles give errors, a closed Done, zero fences
// and an ended Context, never a panic.
func promiseNil(t *testing.T, e *contractEnv, _ string) {
	ctx := context.Background()
	for _, h := range e.k.zeros {
		if err := h.Unlock(ctx); err == nil {
			t.Errorf("%#v: Unlock: no error", h)
		}
		if h.Err() == nil {
			t.Errorf("%#v: Err: nil", h)
		}
		if !isClosed(h.Done()) {
			t.Errorf("%#v: Done not closed", h)
		}
		for _, f := range h.Fences() {
			if f != 0 {
				t.Errorf("%#v: fences %v", h, h.Fences())
			}
		}
		hctx, cancel := h.Context(ctx)
		if hctx.Err() == nil {
			t.Errorf("%#v: Context not ended", h)
		}
		cancel()
		if x, ok := h.(extender); ok {
			if err := x.Extend(ctx, time.Second); err == nil {
				t.Errorf("%#v: Extend: no error", h)
			}
			if _, err := x.TTL(ctx); err == nil {
				t.Errorf("%#v: TTL: no error", h)
			}
		}
	}
}
