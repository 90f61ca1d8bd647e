package quorum

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/protocol"
)

// member is a scripted RedLock member: one lock held in memory, requests
// that run delay after they are sent (time is synctest's, so they cost
// nothing) and then answer, or fail if the caller's context ended by then
// (the request ran, its reply is lost), and every request failing with fail
// without running if it is set. The methods a quorum's Acquire and Release
// need are here; any other one panics on the nil Backend, naming itself.
type member struct {
	protocol.Backend

	mu       sync.Mutex
	delay    time.Duration
	fail     error
	holder   string
	fence    int64
	until    time.Time
	releases []string // the owners whose release reached this member
	// traced: a release that finds no hold of its owner answers CodeAfter
	// (the fence of an acquire is there), not CodeGone.
	traced bool
}

// arrive waits until the request reaches the member; it fails if the member
// refuses every request.
func (m *member) arrive() error {
	m.mu.Lock()
	delay, fail := m.delay, m.fail
	m.mu.Unlock()
	time.Sleep(delay)
	return fail
}

func (m *member) Acquire(ctx context.Context, _ protocol.Keys, owner string, ttl, _ time.Duration, _ protocol.KindArgs) (protocol.AcquireResult, error) {
	if err := m.arrive(); err != nil {
		return protocol.AcquireResult{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	if m.holder != "" && m.holder != owner && now.Before(m.until) {
		return protocol.AcquireResult{Pttl: m.until.Sub(now)}, ctx.Err()
	}
	m.fence++
	m.holder, m.until = owner, now.Add(ttl)
	return protocol.AcquireResult{Fence: m.fence, FenceArg: protocol.BoxFence(m.fence)}, ctx.Err()
}

func (m *member) Release(ctx context.Context, _ protocol.Keys, a protocol.ReleaseArgs) (protocol.Released, error) {
	if err := m.arrive(); err != nil {
		return protocol.Released{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releases = append(m.releases, a.Owner)
	if m.holder != a.Owner || time.Now().After(m.until) {
		if m.traced {
			return protocol.Released{Code: protocol.CodeAfter}, ctx.Err()
		}
		return protocol.Released{Code: protocol.CodeGone}, ctx.Err()
	}
	m.holder = ""
	return protocol.Released{Code: protocol.CodeDone}, ctx.Err()
}

func (m *member) RaiseFence(ctx context.Context, _ protocol.Keys, _ string, fence int64, _ time.Duration) (int64, error) {
	if err := m.arrive(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fence = max(m.fence, fence)
	return m.fence, ctx.Err()
}

func (m *member) Settle() {}

// held reports whether owner holds this member's lock.
func (m *member) held(owner string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.holder == owner && time.Now().Before(m.until)
}

// set runs f on m under its lock.
func (m *member) set(f func(m *member)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// redlock makes a quorum of n scripted members with a per-node timeout of
// 100ms, closed when the test ends.
func redlock(t *testing.T, n int) (protocol.Backend, []*member) {
	ms := make([]*member, n)
	bs := make([]Member, n)
	for i := range ms {
		ms[i] = &member{}
		bs[i] = ms[i]
	}
	closing := make(chan struct{})
	q := New(bs, 100*time.Millisecond, closing)
	t.Cleanup(func() {
		close(closing)
		q.Settle()
	})
	return q, ms
}

var keys = protocol.NewKeys("", protocol.RedMutexKind, "x")

const ttl = 10 * time.Second

// TestAcquireMajority: a lock is taken when a majority grants it in time,
// with the highest fence written back; members down, refusing or slower than
// the node timeout do not count, and the part a slow member took after the
// outcome was known is kept, for the lock was taken.
func TestAcquireMajority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, ms := redlock(t, 5)
		ms[0].set(func(m *member) { m.fail = errors.New("dial tcp: connection refused") })
		ms[1].set(func(m *member) { m.delay = time.Second })
		ms[2].set(func(m *member) { m.fence = 40 })
		r, err := q.Acquire(context.Background(), keys, "a", ttl, 0, protocol.KindArgs{})
		if err != nil {
			t.Fatalf("Acquire with 3 of 5 members in time: %v", err)
		}
		if r.Fence != 41 {
			t.Errorf("fence %d, want 41: the highest a member handed out", r.Fence)
		}
		for i, m := range ms[2:] {
			if !m.held("a") {
				t.Errorf("member %d does not hold the lock", i+2)
			}
			if m.fence != 41 {
				t.Errorf("member %d's fence is %d, want it raised to 41", i+2, m.fence)
			}
		}
		time.Sleep(2 * time.Second) // the slow member's request runs
		synctest.Wait()
		if !ms[1].held("a") {
			t.Error("the slow member's part of a lock that was taken was undone")
		}
	})
}

// TestAcquireShort: with fewer than a majority granting, Acquire fails with
// a QuorumError and every part it took is undone, also one taken by a request
// that answered after the outcome was known. The failure is an outage to ride
// out while some member did not answer; members that all refused the request
// would refuse it again.
func TestAcquireShort(t *testing.T) {
	refused := replyError("ERR value is not an integer or out of range")
	for _, c := range []struct {
		name      string
		fail      []error // of members 0, 1 and 2 (all if 5); the others grant
		delay     time.Duration
		transient bool
	}{
		{"members down", []error{errs.ErrNodeTimeout, errs.ErrNodeTimeout, errs.ErrNodeTimeout}, 0, true},
		{"members slow", []error{nil, nil, nil}, time.Second, true},
		{"members refuse", []error{refused, refused, refused, refused, refused}, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q, ms := redlock(t, 5)
				for i, err := range c.fail {
					ms[i].set(func(m *member) { m.fail, m.delay = err, c.delay })
				}
				_, err := q.Acquire(context.Background(), keys, "a", ttl, 0, protocol.KindArgs{})
				var qe *errs.QuorumError
				if !errors.As(err, &qe) || !errors.Is(err, errs.ErrNotAcquired) {
					t.Fatalf("Acquire: %v, want ErrNotAcquired and a QuorumError", err)
				}
				if qe.Answered >= qe.Need || qe.Need != 3 || qe.Nodes != 5 {
					t.Errorf("QuorumError %+v, want fewer than 3 of 5 answered, 3 needed", *qe)
				}
				if got := protocol.Transient(err); got != c.transient {
					t.Errorf("Transient(%v) = %v, want %v", err, got, c.transient)
				}
				time.Sleep(2 * time.Second) // every answer has come
				synctest.Wait()
				for i, m := range ms {
					if m.held("a") {
						t.Errorf("member %d holds a part of the failed acquire", i)
					}
				}
			})
		})
	}
}

// TestAcquireHeld: a lock another owner holds on a majority is not taken; the
// caller is told the shortest time a holder told, and its parts on the
// members where the lock was free are undone, also those taken after the
// outcome was known.
func TestAcquireHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, ms := redlock(t, 5)
		for i, left := range []time.Duration{3 * time.Second, 2 * time.Second, 5 * time.Second} {
			ms[i].set(func(m *member) { m.holder, m.until = "b", time.Now().Add(left) })
		}
		r, err := q.Acquire(context.Background(), keys, "a", ttl, 0, protocol.KindArgs{})
		if err != nil {
			t.Fatalf("Acquire of a lock held on 3 of 5 members: %v", err)
		}
		// The wait is the shortest a holder told, plus a short random pause
		// if the caller took the lock on some members (so that two callers
		// that split it do not meet again).
		if r.Fence != 0 || r.Pttl < 2*time.Second || r.Pttl > 2*time.Second+11*time.Millisecond {
			t.Errorf("result %+v, want not taken with 2s to wait", r)
		}
		synctest.Wait()
		for i, m := range ms[3:] {
			if m.held("a") {
				t.Errorf("member %d still holds the part of an acquire that found the lock held", i+3)
			}
		}
	})
}

// TestReleaseMajority: a release that a majority confirms is done, and goes
// to every member, the slow ones included, whatever the caller's wait.
func TestReleaseMajority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, ms := redlock(t, 5)
		ctx := context.Background()
		r, err := q.Acquire(ctx, keys, "a", ttl, 0, protocol.KindArgs{})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // every member has answered the acquire
		ms[4].set(func(m *member) { m.delay = time.Second })
		rel, err := q.Release(ctx, keys, protocol.ReleaseArgs{Owner: "a", Fence: protocol.BoxFence(r.Fence), Mode: protocol.ReleaseLast, TTL: ttl})
		if err != nil || rel.Code != protocol.CodeDone {
			t.Fatalf("Release: %+v, %v; want CodeDone", rel, err)
		}
		synctest.Wait()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		for i, m := range ms {
			if m.held("a") {
				t.Errorf("member %d still holds the released lock", i)
			}
		}
	})
}

// TestReleaseUnknown: a release that one member confirms, another finds
// free of its owner with the acquire's fence there (the acquire reached it
// too late), and the third does not answer, fails: the silent member may
// hold the lock, and its answer on a later try decides; it is no loss.
func TestReleaseUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, ms := redlock(t, 3)
		ctx := context.Background()
		ms[0].set(func(m *member) { m.fail, m.traced = errors.New("down"), true })
		r, err := q.Acquire(ctx, keys, "a", ttl, 0, protocol.KindArgs{})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ms[0].set(func(m *member) { m.fail = nil })
		ms[2].set(func(m *member) { m.fail = errors.New("i/o timeout") })
		rel, err := q.Release(ctx, keys, protocol.ReleaseArgs{Owner: "a", Fence: protocol.BoxFence(r.Fence), Mode: protocol.ReleaseLast, TTL: ttl})
		if err == nil {
			t.Fatalf("Release: %+v, nil; want an error, for the member that did not answer may hold it", rel)
		}
		t.Logf("Release: %v", err)
		ms[2].set(func(m *member) { m.fail = nil })
		rel, err = q.Release(ctx, keys, protocol.ReleaseArgs{Owner: "a", Fence: protocol.BoxFence(r.Fence), Mode: protocol.ReleaseLast, TTL: ttl})
		if err != nil || rel.Code != protocol.CodeDone && rel.Code != protocol.CodeAfter {
			t.Fatalf("Release tried again: %+v, %v", rel, err)
		}
	})
}

// replyError is an error reply of a member's server, as go-redis gives it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}
