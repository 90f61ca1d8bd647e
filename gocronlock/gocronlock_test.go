package gocronlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/gocronlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newClient returns a dlock Client on srv, closed when the test ends.
func newClient(t *testing.T, srv *redistest.Server, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.New(srv.Client(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitLeader waits until e leads, failing the test after bound.
func waitLeader(t *testing.T, e *gocronlock.Elector, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for e.IsLeader(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not the leader after %v: %v", bound, e.IsLeader(context.Background()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBadInput: every misuse is an error that says what is wrong, never a
// panic.
func TestBadInput(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	closed := newClient(t, srv)
	_ = closed.Close()
	var nilRDB *redis.Client
	// A RedLock Client, never used: an Election on it is refused at once.
	var members []redis.UniversalClient
	for db := range 3 {
		m := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: db})
		t.Cleanup(func() { _ = m.Close() })
		members = append(members, m)
	}
	red, err := dlock.NewRedLock(members)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = red.Close() })
	ctx := context.Background()
	var nilLocker *gocronlock.Locker
	var nilElector *gocronlock.Elector
	var nilCtx context.Context
	locker, err := gocronlock.NewLocker(c)
	if err != nil {
		t.Fatal(err)
	}
	call := func(f func() error) func() error { return f }
	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"NewLocker nil Client", call(func() error { _, err := gocronlock.NewLocker(nil); return err }), "nil or zero *dlock.Client"},
		{"NewLocker zero Client", call(func() error { _, err := gocronlock.NewLocker(&dlock.Client{}); return err }), "nil or zero *dlock.Client"},
		{"NewLocker negative min hold", call(func() error { _, err := gocronlock.NewLocker(c, gocronlock.WithMinHold(-time.Second)); return err }), "negative"},
		{"NewLocker nil Option", call(func() error { _, err := gocronlock.NewLocker(c, nil); return err }), "nil Option"},
		{"Lock nil Locker", call(func() error { _, err := nilLocker.Lock(ctx, "job"); return err }), "nil or zero Locker"},
		{"Lock zero Locker", call(func() error { _, err := (&gocronlock.Locker{}).Lock(ctx, "job"); return err }), "nil or zero Locker"},
		{"Lock nil context", call(func() error { _, err := locker.Lock(nilCtx, "job"); return err }), "nil context"},
		{"Lock empty job name", call(func() error { _, err := locker.Lock(ctx, ""); return err }), "empty job name"},
		{"Lock job name too long", call(func() error { _, err := locker.Lock(ctx, strings.Repeat("x", dlock.MaxNameLen)); return err }), "MaxNameLen"},
		{"Close nil Locker", nilLocker.Close, "nil or zero Locker"},
		{"NewElector nil Election", call(func() error { _, err := gocronlock.NewElector(nil, "v"); return err }), "nil *dlock.Election"},
		{"NewElector zero Election", call(func() error { _, err := gocronlock.NewElector(&dlock.Election{}, "v"); return err }), "nil or zero Election"},
		{"NewElector empty value", call(func() error { _, err := gocronlock.NewElector(c.Election("e"), ""); return err }), "empty value"},
		{"NewElector value too long", call(func() error {
			_, err := gocronlock.NewElector(c.Election("e"), strings.Repeat("v", dlock.MaxValueLen+1))
			return err
		}), "MaxValueLen"},
		{"NewElector empty name", call(func() error { _, err := gocronlock.NewElector(c.Election(""), "v"); return err }), "empty name"},
		{"NewElector Election of a nil Client", call(func() error {
			var nc *dlock.Client
			_, err := gocronlock.NewElector(nc.Election("e"), "v")
			return err
		}), "nil or zero Client"},
		{"NewElector RedLock Client", call(func() error { _, err := gocronlock.NewElector(red.Election("e"), "v"); return err }), "RedLock"},
		{"NewElector closed Client", call(func() error { _, err := gocronlock.NewElector(closed.Election("e"), "v"); return err }), "closed"},
		{"NewLocker Client on a nil Redis client", call(func() error {
			c, err := dlock.New(nilRDB)
			if err != nil {
				return err
			}
			_, err = gocronlock.NewLocker(c)
			return err
		}), "nil"},
		{"IsLeader nil Elector", call(func() error { return nilElector.IsLeader(ctx) }), "nil or zero Elector"},
		{"IsLeader zero Elector", call(func() error { return (&gocronlock.Elector{}).IsLeader(ctx) }), "nil or zero Elector"},
		{"Close nil Elector", nilElector.Close, "nil or zero Elector"},
		{"Close zero Elector", (&gocronlock.Elector{}).Close, "nil or zero Elector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
	if l := nilElector.Leadership(); l != nil {
		t.Fatalf("a nil Elector's Leadership is %v, not nil", l)
	}
	var redLockErr error
	_, redLockErr = gocronlock.NewElector(red.Election("e"), "v")
	if !errors.Is(redLockErr, errors.ErrUnsupported) {
		t.Fatalf("NewElector on a RedLock Client: %v, want an error matching errors.ErrUnsupported", redLockErr)
	}
	if err := locker.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := locker.Lock(ctx, "job"); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Lock after Close: %v, want an error that says the Locker is closed", err)
	}
}

// TestLockerMinHold: a run that ends before the min hold keeps its lock
// until then (Close waits for it, and the lock is free once Close has
// returned); a run that ends after it releases the lock at once.
func TestLockerMinHold(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	ctx := context.Background()
	a, err := gocronlock.NewLocker(c, gocronlock.WithMinHold(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	b, err := gocronlock.NewLocker(c, gocronlock.WithMinHold(0))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lock, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Lock while another run holds it: %v, want ErrNotAcquired", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatalf("Unlock before the min hold: %v", err)
	}
	if err := lock.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	if _, err := b.Lock(ctx, "job"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Lock after a run that ended within the min hold: %v, want ErrNotAcquired", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// b's min hold is 0: its Unlock releases at once.
	lock, err = b.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock once the min hold has passed: %v", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lock, err = b.Lock(ctx, "job")
	if err != nil {
		t.Fatalf("Lock after an Unlock without min hold: %v", err)
	}
	if err := lock.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectorCloseHandsOver: an Elector's Close resigns, so another
// candidate leads at once, under a higher term: with a TTL of 30s, before
// TTL/2 (it would take the TTL if the leadership ran out instead). The
// other is not the leader until then.
func TestElectorCloseHandsOver(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 30 * time.Second
	c1, c2 := newClient(t, srv, dlock.WithTTL(ttl)), newClient(t, srv, dlock.WithTTL(ttl))
	ctx := context.Background()
	e1, err := gocronlock.NewElector(c1.Election("handover"), "one")
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, e1, ttl/2)
	term1 := e1.Leadership().Term()
	e2, err := gocronlock.NewElector(c2.Election("handover"), "two")
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	if err := e2.IsLeader(ctx); !errors.Is(err, gocronlock.ErrNotLeader) {
		t.Fatalf("the second candidate's IsLeader while the first leads: %v, want ErrNotLeader", err)
	}
	if l, err := c2.Election("handover").Leader(ctx); err != nil || l.Value != "one" || l.Term != term1 {
		t.Fatalf("Leader while the first leads: %+v, %v", l, err)
	}
	closed := time.Now()
	if err := e1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e1.IsLeader(ctx); !errors.Is(err, gocronlock.ErrNotLeader) || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("IsLeader after Close: %v, want ErrNotLeader and ErrNotHeld (resigned)", err)
	}
	if e1.Leadership() != nil {
		t.Fatal("a Leadership after Close")
	}
	waitLeader(t, e2, ttl/2)
	if took := time.Since(closed); took >= ttl/2 {
		t.Fatalf("the next candidate led %v after Close: not granted by the resignation", took)
	}
	if term2 := e2.Leadership().Term(); term2 <= term1 {
		t.Fatalf("term %d after %d", term2, term1)
	}
	if err := e1.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestElectorClientClosed: closing the dlock Client ends the leadership and
// the Elector's campaign: IsLeader says why, and Close returns.
func TestElectorClientClosed(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv)
	e, err := gocronlock.NewElector(c.Election("closing"), "one")
	if err != nil {
		t.Fatal(err)
	}
	waitLeader(t, e, 10*time.Second)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.IsLeader(context.Background()); !errors.Is(err, gocronlock.ErrNotLeader) || !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("IsLeader after the Client's Close: %v, want ErrNotLeader and ErrClosed", err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close after the Client's: %v", err)
	}
}
