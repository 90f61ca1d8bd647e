package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/idempotency"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// roundTrips is a go-redis hook that counts the round trips a client makes
// to Redis: each command sent alone and each pipeline is one. The commands
// of a new connection's handshake are left out.
type roundTrips struct{ n atomic.Int64 }

func (rt *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (rt *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			rt.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (rt *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if !handshake(cmd) {
				rt.n.Add(1)
				break
			}
		}
		return next(ctx, cmds)
	}
}

func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "client":
		return true
	}
	return false
}

// TestRoundTrips: a first run of a key takes two round trips of the Store's
// own, one before fn and one after, besides the lock's two (its acquire and
// its release). The Store and its dlock Client use two go-redis clients
// here, so that each is counted apart.
func TestRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	var own, lock roundTrips
	storeRDB, lockRDB := srv.Client(t), srv.Client(t)
	storeRDB.AddHook(&own)
	lockRDB.AddHook(&lock)
	c, err := dlock.New(lockRDB)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := idempotency.New(c, storeRDB)
	if err != nil {
		t.Fatal(err)
	}
	fn := func(context.Context) ([]byte, bool, error) { return []byte("done"), true, nil }
	// The Client's first use loads its scripts, and starts its check of
	// Redis (INFO, CONFIG GET) in the background: counted from after both.
	if _, err := s.Do(ctx, "warm-up", "fp", fn); err != nil {
		t.Fatal(err)
	}
	for last, deadline := int64(-1), time.Now().Add(5*time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n := lock.n.Load()
		if n == last {
			break
		}
		last = n
	}

	own.n.Store(0)
	lock.n.Store(0)
	if r, err := s.Do(ctx, "k", "fp", fn); err != nil || r.Replayed {
		t.Fatalf("first run: %+v, %v", r, err)
	}
	if n := own.n.Load(); n != 2 {
		t.Errorf("a first run made %d round trips of the Store's own, want 2", n)
	}
	if n := lock.n.Load(); n != 2 {
		t.Errorf("a first run's lock made %d round trips, want 2 (acquire, release)", n)
	}

	own.n.Store(0)
	lock.n.Store(0)
	if r, err := s.Do(ctx, "k", "fp", fn); err != nil || !r.Replayed {
		t.Fatalf("replay: %+v, %v", r, err)
	}
	t.Logf("a replay made %d round trips of the Store's own and %d of the lock's", own.n.Load(), lock.n.Load())
}
