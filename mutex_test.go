package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newClient starts a private redis-server and returns a dlock Client on it,
// closed when the test ends, with the raw go-redis client for inspection.
func newClient(t *testing.T, opts ...dlock.Option) (*dlock.Client, *redis.Client, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	return clientOn(t, rdb, opts...), rdb, srv
}

// clientOn returns a dlock Client on rdb, closed when the test ends.
func clientOn(t *testing.T, rdb redis.UniversalClient, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(rdb, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func TestLockUnlock(t *testing.T) {
	c, rdb, _ := newClient(t)
	ctx := context.Background()
	m := c.Mutex("orders")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if got := rdb.HGetAll(ctx, "dlock:{orders}").Val(); len(got) != 1 {
		t.Fatalf("lock hash = %v, want one owner", got)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock: %v, want ErrNotAcquired", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if n := rdb.Exists(ctx, "dlock:{orders}").Val(); n != 0 {
		t.Fatalf("lock key still exists after Unlock")
	}
	select {
	case <-l.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed after Unlock")
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
}
