package dlock_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// lockState is a Mutex's, a FairMutex's or an Election's lock as Redis keeps
// it: one string key, "<fence>|<holds>|<waits>|<until>|<owner>" (the owner
// followed by "/<gen>" once its lease was extended), then
// "|<link>" and "|<records>" when they are not empty, or "<fence>" alone for
// a free lock nobody waits for (internal/protocol/lua/lib_state.lua).
type lockState struct {
	Exists  bool   // the key is there (held, or free with its last fence)
	Fence   int64  // the last fence handed out
	Holds   int    // the holder's hold count, 0 when free or granted and not yet taken up
	Waits   bool   // the queue may hold waiters
	Until   int64  // when the lease ends (server ms), 0: with the key
	Owner   string // the holder, "" when free
	Gen     int    // how many of the holder's Extends Redis ran
	Links   string // the fences of the releases the state follows, latest first
	Records string // owners that ended with an acquire on its way, or whose hold was taken away
}

var (
	lockStateRE = regexp.MustCompile(`^(\d+)\|(\d+)\|([01])\|(\d+)\|([^|/]*)(?:/(\d+))?\|?([\d,]*)\|?(.*)$`)
	freeStateRE = regexp.MustCompile(`^\d+$`)
)

// readLock reads the lock state at key, failing the test if the key holds
// anything else.
func readLock(t testing.TB, rdb redis.Cmdable, key string) lockState {
	t.Helper()
	s, err := readLockErr(rdb, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readLockErr is readLock for a caller that is not a test's goroutine.
func readLockErr(rdb redis.Cmdable, key string) (lockState, error) {
	v, err := rdb.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return lockState{}, nil
	}
	if err != nil {
		return lockState{}, fmt.Errorf("read the lock %s: %w", key, err)
	}
	if freeStateRE.MatchString(v) {
		f, _ := strconv.ParseInt(v, 10, 64)
		return lockState{Exists: true, Fence: f}, nil
	}
	m := lockStateRE.FindStringSubmatch(v)
	if m == nil {
		return lockState{}, fmt.Errorf("lock %s holds %q, not a lock state", key, v)
	}
	f, _ := strconv.ParseInt(m[1], 10, 64)
	c, _ := strconv.Atoi(m[2])
	u, _ := strconv.ParseInt(m[4], 10, 64)
	g, _ := strconv.Atoi(m[6])
	return lockState{Exists: true, Fence: f, Holds: c, Waits: m[3] == "1", Until: u, Owner: m[5], Gen: g, Links: m[7], Records: m[8]}, nil
}

// Held tells whether s has a holder whose lease runs (the tests' servers
// share the machine's clock).
func (s lockState) Held() bool {
	return s.Owner != "" && (s.Until == 0 || s.Until > time.Now().UnixMilli())
}

// holderOf returns the owner holding the lock at key, "" if none.
func holderOf(t testing.TB, rdb redis.Cmdable, key string) string {
	t.Helper()
	if s := readLock(t, rdb, key); s.Held() {
		return s.Owner
	}
	return ""
}

// writeLock makes owner hold the lock at key, with fence and ttl, as a
// take would (nobody waiting).
func writeLock(ctx context.Context, rdb redis.Cmdable, key, owner string, fence int64, ttl time.Duration) error {
	return rdb.Set(ctx, key, fmt.Sprintf("%d|1|0|0|%s", fence, owner), ttl).Err()
}

// leaseLeft returns how long owner's lease on the lock at key (a Mutex's, a
// FairMutex's or an Election's) has left as Redis keeps it: until its
// "until", or else the key's PTTL; 0 if owner does not hold the lock, or
// its key has no expiry (dlock writes none without).
func leaseLeft(t testing.TB, rdb redis.Cmdable, key, owner string) time.Duration {
	t.Helper()
	s := readLock(t, rdb, key)
	if !s.Held() || s.Owner != owner {
		return 0
	}
	if s.Until != 0 {
		return time.Until(time.UnixMilli(s.Until))
	}
	p, err := rdb.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return max(p, 0)
}

// holdLeft returns what is left of the lease of the lock state at key (a
// Mutex's, a FairMutex's or an Election's): up to its until if the key
// outlives the lease (after a grant), else the key's PTTL; 0 if nobody holds
// it, below 0 if the holder's lease has run out.
func holdLeft(t testing.TB, rdb redis.Cmdable, key string) time.Duration {
	t.Helper()
	s := readLock(t, rdb, key)
	if s.Owner == "" {
		return 0
	}
	if s.Until == 0 {
		return rdb.PTTL(context.Background(), key).Val()
	}
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(s.Until-now.UnixMilli()) * time.Millisecond
}

// freedErr returns nil if the lock state at key (a Mutex's, a FairMutex's or
// an Election's) is freed: gone, or left free (no holder, no holds, nobody
// waiting) with an expiry at most lease from now, so that nothing of it stays
// behind longer than the lease would have, or, if it keeps records of owners
// whose acquire may still arrive, longer than those requests' deadline;
// else what is wrong.
func freedErr(rdb redis.Cmdable, key string, lease time.Duration) error {
	s, err := readLockErr(rdb, key)
	if err != nil || !s.Exists {
		return err
	}
	if s.Owner != "" || s.Holds != 0 || s.Waits || s.Until != 0 {
		return fmt.Errorf("%s holds %+v, want it free", key, s)
	}
	if s.Records != "" {
		// A record lasts until its request's deadline, rounded up.
		lease = max(lease, dlock.RequestTTL+time.Second)
	}
	p, err := rdb.PTTL(context.Background(), key).Result()
	switch {
	case err != nil:
		return err
	case p == -2: // expired since it was read
		return nil
	case p == -1:
		return fmt.Errorf("%s is left free without an expiry", key)
	case p <= 0 || p > lease:
		return fmt.Errorf("%s is left free for %v, want an expiry within the lease %v", key, p, lease)
	}
	return nil
}
