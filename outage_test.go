package dlock_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/faultproxy"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestOutageAfterFirstContact: whatever request first had Redis's answer
// (Check, Inspect, Locks, a latch's or a Semaphore's own call), a Lock made
// when Redis has gone away afterwards rides the outage out, as one after an
// earlier Lock does, and takes the lock once Redis is back.
func TestOutageAfterFirstContact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		contact func(*dlock.Client) error
	}{
		{"Check", func(c *dlock.Client) error { return c.Check(ctx) }},
		{"Inspect", func(c *dlock.Client) error {
			_, err := c.Inspect(ctx, dlock.KindMutex, "other")
			return err
		}},
		{"Locks", func(c *dlock.Client) error {
			for _, err := range c.Locks(ctx, "*") {
				if err != nil {
					return err
				}
			}
			return nil
		}},
		{"CountDownLatch.Count", func(c *dlock.Client) error {
			_, err := c.CountDownLatch("other").Count(ctx)
			return err
		}},
		{"Semaphore.Available", func(c *dlock.Client) error {
			_, err := c.Semaphore("other", 2).Available(ctx)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // a server each
			srv := redistest.Start(t)
			log := newOutageLog()
			c := clientOn(t, quickClient(t, srv.Addr), dlock.WithLogger(slog.New(log)))
			if err := tc.contact(c); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if err := srv.Kill(); err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				defer cancel()
				l, err := c.Mutex("export").Lock(lctx)
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			// Redis comes back only once the Lock has met the outage and
			// said it waits for it.
			select {
			case <-log.waiting:
			case err := <-got:
				t.Fatalf("Lock during an outage, after only %s reached Redis, did not wait for it: %v", tc.name, err)
			}
			if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("Lock across an outage, after only %s reached Redis: %v", tc.name, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Lock still waiting 10s after Redis came back")
			}
		})
	}
}

// TestOutageGiveUp: a waiting call whose context ends while Redis is
// unavailable says so, how long it had been and what the last failed request
// met, and its error still matches its context's: a Lock whose request was
// left behind at the deadline (Redis stopped answering after refusing), and
// a CountDownLatch.Wait cut short while riding out a stopped server.
func TestOutageGiveUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// says checks that err tells of an outage of at most d whose last
	// failure matched one of want.
	says := func(t *testing.T, err error, d time.Duration, want ...string) {
		t.Helper()
		t.Logf("gave up: %v", err)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %q does not match context.DeadlineExceeded", err)
		}
		msg := err.Error()
		_, after, ok := strings.Cut(msg, "Redis unavailable for ")
		if !ok {
			t.Fatalf("error %q does not say how long Redis was unavailable", msg)
		}
		s, _, _ := strings.Cut(after, ":")
		if n, perr := time.ParseDuration(s); perr != nil || n <= 0 || n > d {
			t.Errorf("error %q names an outage of %q, want a duration within the wait's %v", msg, s, d)
		}
		for _, w := range want {
			if strings.Contains(after, w) {
				return
			}
		}
		t.Errorf("error %q does not say what the last request met (one of %q)", msg, want)
	}

	t.Run("lock-left-behind", func(t *testing.T) {
		t.Parallel() // a server each
		srv := redistest.Start(t)
		p := faultproxy.Start(t, srv.Addr)
		log := newOutageLog()
		c := clientOn(t, quickClient(t, p.Addr()), dlock.WithLogger(slog.New(log)))
		if l, err := c.Mutex("warm").Lock(ctx); err != nil {
			t.Fatal(err)
		} else if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// Connections are refused (accepted and closed: EOF) until the
		// Lock has met that; from then on they hang, so the deadline
		// comes while a request is in flight.
		p.Refuse(true)
		p.Cut()
		const deadline = 2 * time.Second
		got := make(chan error, 1)
		go func() {
			lctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			_, err := c.Mutex("export").Lock(lctx)
			got <- err
		}()
		select {
		case <-log.waiting:
		case err := <-got:
			t.Fatalf("Lock during an outage did not wait for it: %v", err)
		}
		p.Pause()
		p.Refuse(false)
		err := <-got
		p.Resume() // the request left behind is answered, and undone
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("Lock that gave up: %v, want ErrNotAcquired", err)
		}
		says(t, err, deadline, io.EOF.Error(), "connection reset")
	})

	t.Run("latch-wait", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		c := clientOn(t, quickClient(t, srv.Addr))
		if l, err := c.Mutex("warm").Lock(ctx); err != nil {
			t.Fatal(err)
		} else if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		latch := c.CountDownLatch("export")
		if _, err := latch.TrySetCount(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := srv.Kill(); err != nil {
			t.Fatal(err)
		}
		const deadline = time.Second
		wctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		err := latch.Wait(wctx)
		says(t, err, deadline, "connection refused", io.EOF.Error())
	})
}

// quickClient is a Redis client of addr that gives up on a refused
// connection at once, well within the outages these tests make (go-redis's
// defaults retry for about 2s).
func quickClient(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// outageLog is a slog.Handler that closes waiting when a call first logs that
// it waits for Redis to come back.
type outageLog struct {
	once    sync.Once
	waiting chan struct{}
}

func newOutageLog() *outageLog { return &outageLog{waiting: make(chan struct{})} }

func (h *outageLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *outageLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "dlock: Redis unavailable; waiting for it" {
		h.once.Do(func() { close(h.waiting) })
	}
	return nil
}

func (h *outageLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *outageLog) WithGroup(string) slog.Handler      { return h }
