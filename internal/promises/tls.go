package promises

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// DialTLS returns a Client on the Redis server at addr over TLS with cfg,
// which the caller closes.
type DialTLS func(t *testing.T, addr string, cfg *tls.Config, opts ...dlock.Option) *dlock.Client

// RunTLS runs the promises that the Redis client's TLS connections must
// keep: Check, a lock taken and given back, and a waiter woken by the grant
// on its wake-up connection, each over TLS.
func RunTLS(t *testing.T, dial DialTLS) {
	_, addr, cfg := redistest.StartTLS(t)
	ctx := timeout(t)
	client := func(opts ...dlock.Option) *dlock.Client {
		c := dial(t, addr, cfg, opts...)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	// A TTL far beyond the test's deadline: only a grant hands the lock
	// over in time.
	a, b := client(dlock.WithTTL(5*time.Minute)), client(dlock.WithTTL(5*time.Minute))
	if err := a.Check(ctx); err != nil {
		t.Fatalf("Check over TLS: %v", err)
	}
	l, err := a.Mutex("tls").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		wl, err := b.Mutex("tls").Lock(ctx)
		if err == nil {
			err = wl.Unlock(ctx)
		}
		got <- err
	}()
	waitQueued(t, ctx, a, dlock.KindMutex, "tls", 1)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter over TLS: %v", err)
	}
}
