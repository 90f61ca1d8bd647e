package renew

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock/internal/protocol"
	"github.com/dlock-go/dlock/internal/timing"
)

// backend is a scripted server for the renewer: every renewal round
// (ExtendAll) is recorded and answered after delay, each lease's code
// from codes (CodeDone unless set), or not at all while hang is set (the
// call ends with its context). What the renewer does not call panics on the
// nil Backend, naming the method.
type backend struct {
	protocol.Backend

	traits protocol.Traits // set before the renewer is made

	mu     sync.Mutex
	delay  time.Duration
	hang   bool
	codes  map[string]int64 // owner -> code
	rounds [][]int          // per round, the size of each script call
}

func (b *backend) ExtendAll(ctx context.Context, calls [][]protocol.ExtendItem, _ *protocol.Record) ([][]int64, []error) {
	b.mu.Lock()
	sizes := make([]int, len(calls))
	for i, c := range calls {
		sizes[i] = len(c)
	}
	b.rounds = append(b.rounds, sizes)
	delay, hang := b.delay, b.hang
	b.mu.Unlock()
	codes, errs := make([][]int64, len(calls)), make([]error, len(calls))
	if hang {
		<-ctx.Done()
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return codes, errs
	}
	time.Sleep(delay)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, c := range calls {
		codes[i] = make([]int64, len(c))
		for j, it := range c {
			code, ok := b.codes[it.Owner]
			if !ok {
				code = protocol.CodeDone
			}
			codes[i][j] = code
		}
	}
	return codes, errs
}

func (b *backend) ShardOf(context.Context, string) (string, error) { return "", nil }
func (b *backend) Group(string) int                                { return 0 }
func (b *backend) Traits() protocol.Traits                         { return b.traits }

func (b *backend) set(f func(b *backend)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
}

// events records the leases the renewer reports lost.
type events struct {
	mu   sync.Mutex
	lost map[string]time.Time // owner -> when it was reported
}

func (e *events) Lost(t *Term, _ error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lost[t.Owner] = time.Now()
}
func (e *events) Extended(*Term)              {}
func (e *events) ExtendFailed([]*Term, error) {}
func (e *events) Record() *protocol.Record    { return nil }
func (e *events) Recorded(*protocol.Record)   {}
func (e *events) lostAt(owner string) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	at, ok := e.lost[owner]
	return at, ok
}

// renewer makes a Renewer on a scripted backend, stopped when the test ends.
func renewer(t *testing.T) (*Renewer, *backend, *events) {
	b, ev := &backend{codes: map[string]int64{}}, &events{lost: map[string]time.Time{}}
	r := New(b, slog.New(slog.DiscardHandler), ev)
	t.Cleanup(func() { r.Stop() })
	return r, b, ev
}

// begin starts n leases of ttl, owners o0, o1, ...
func begin(t *testing.T, r *Renewer, n int, ttl time.Duration) []*Term {
	t.Helper()
	k := protocol.NewKeys("", protocol.MutexKind, "x")
	ts := make([]*Term, n)
	for i := range ts {
		owner := "o" + string(rune('0'+i%10)) + string(rune('a'+i/10%26)) + string(rune('a'+i/260))
		tm, err := r.Begin(&k, owner, int64(i+1), Start{TTL: ttl, Renew: true, Sent: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		ts[i] = tm
	}
	return ts
}

// TestRenewBatches: 300 leases of one TTL are renewed together, once a third
// of the TTL: a round trip (a pipeline, one ExtendAll) per 128 leases, and
// stay held.
func TestRenewBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, b, ev := renewer(t)
		const ttl, periods = 3 * time.Second, 6
		ts := begin(t, r, 300, ttl)
		time.Sleep(periods * ttl / 3)
		synctest.Wait()
		for _, tm := range ts {
			if err := tm.Check(); err != nil {
				t.Fatalf("lease %s lost while renewed: %v", tm.Owner, err)
			}
		}
		if len(ev.lost) != 0 {
			t.Errorf("%d leases reported lost", len(ev.lost))
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		leases := 0
		for _, round := range b.rounds {
			n := 0
			for _, size := range round {
				n += size
			}
			if n > 128 {
				t.Errorf("a round trip of %d leases, want at most 128", n)
			}
			leases += n
		}
		if want := periods * 3; len(b.rounds) != want || leases != periods*len(ts) {
			t.Errorf("%d round trips renewing %d leases over %d periods, want %d renewing %d: each lease once a period, 128 a trip",
				len(b.rounds), leases, periods, want, periods*len(ts))
		}
	})
}

// TestRenewLost: a lease Redis says is gone is reported lost at once, and its
// Check says so; the others go on.
func TestRenewLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, b, ev := renewer(t)
		const ttl = 3 * time.Second
		ts := begin(t, r, 3, ttl)
		b.set(func(b *backend) { b.codes[ts[1].Owner] = protocol.CodeGone })
		start := time.Now()
		time.Sleep(ttl / 3)
		synctest.Wait()
		at, ok := ev.lostAt(ts[1].Owner)
		if !ok || at.Sub(start) > ttl/3 {
			t.Fatalf("the gone lease was not reported lost at the first renewal (%v, %v)", ok, at.Sub(start))
		}
		if err := ts[1].Check(); err == nil {
			t.Error("the lost lease's Check says nil")
		}
		time.Sleep(2 * ttl)
		synctest.Wait()
		for _, tm := range []*Term{ts[0], ts[2]} {
			if err := tm.Check(); err != nil {
				t.Errorf("lease %s lost beside the gone one: %v", tm.Owner, err)
			}
		}
	})
}

// TestRenewUnanswered: while renewals get no answer, each lease ends at its
// local deadline, a TTL less the drift allowance after its acquire was sent,
// never later, and its Check says so from then on.
func TestRenewUnanswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, b, ev := renewer(t)
		const ttl = 3 * time.Second
		b.set(func(b *backend) { b.hang = true })
		start := time.Now()
		ts := begin(t, r, 2, ttl)
		time.Sleep(ttl)
		synctest.Wait()
		for _, tm := range ts {
			at, ok := ev.lostAt(tm.Owner)
			if !ok {
				t.Fatalf("lease %s not reported lost a TTL after it began", tm.Owner)
			}
			if limit := ttl - timing.Drift(ttl); at.Sub(start) > limit {
				t.Errorf("lease %s reported lost %v after it began, later than its TTL less the drift allowance, %v", tm.Owner, at.Sub(start), limit)
			}
			if err := tm.Check(); err == nil {
				t.Errorf("lease %s: Check says nil past its deadline", tm.Owner)
			}
		}
	})
}

// TestRenewStalled: a renewal answered later than the lease's deadline does
// not save it; one answered before does.
func TestRenewStalled(t *testing.T) {
	for _, c := range []struct {
		delay time.Duration
		held  bool
	}{{500 * time.Millisecond, true}, {5 * time.Second, false}} {
		synctest.Test(t, func(t *testing.T) {
			r, b, _ := renewer(t)
			const ttl = 3 * time.Second
			b.set(func(b *backend) { b.delay = c.delay })
			ts := begin(t, r, 1, ttl)
			time.Sleep(ttl + time.Second)
			synctest.Wait()
			if err := ts[0].Check(); (err == nil) != c.held {
				t.Errorf("renewals answered after %v: Check = %v, want held %v", c.delay, err, c.held)
			}
		})
	}
}

// TestRenewDatedFromRequest: a renewal's new deadline counts from when it
// was sent, not from its reply: Redis may have run it as soon as it was sent.
func TestRenewDatedFromRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, b, _ := renewer(t)
		const ttl = 3 * time.Second
		b.set(func(b *backend) { b.delay = 400 * time.Millisecond })
		start := time.Now()
		ts := begin(t, r, 1, ttl)
		time.Sleep(ttl/3 + time.Second) // the first renewal, sent a third of the TTL in, is answered
		synctest.Wait()
		if got, want := r.DeadlineOf(ts[0]).Sub(start), ttl/3+ttl-timing.Drift(ttl); got != want {
			t.Errorf("deadline %v after the lease began, want %v: a TTL less the drift allowance after the renewal was sent", got, want)
		}
	})
}

// TestLanded: on a backend whose release refuses no late request
// (NoScripts), Landed waits for a renewal on its way, and returns at once
// when none is; elsewhere it never waits.
func TestLanded(t *testing.T) {
	for _, noScripts := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			b, ev := &backend{codes: map[string]int64{}, traits: protocol.Traits{NoScripts: noScripts}}, &events{lost: map[string]time.Time{}}
			r := New(b, slog.New(slog.DiscardHandler), ev)
			defer r.Stop()
			const ttl, delay = 3 * time.Second, 300 * time.Millisecond
			b.set(func(b *backend) { b.delay = delay })
			tm := begin(t, r, 1, ttl)[0]
			time.Sleep(timing.RenewEvery(ttl) + 10*time.Millisecond) // the renewal is on its way
			r.Retire(tm)
			start := time.Now()
			r.Landed(context.Background(), tm)
			waited := time.Since(start)
			if want := delay - 10*time.Millisecond; noScripts && waited != want {
				t.Errorf("NoScripts: Landed returned after %v, not when the renewal's reply came (%v)", waited, want)
			}
			if !noScripts && waited != 0 {
				t.Errorf("with scripts: Landed waited %v", waited)
			}
			start = time.Now()
			r.Landed(context.Background(), tm)
			if waited := time.Since(start); waited != 0 {
				t.Errorf("NoScripts %v: Landed waited %v with no renewal on its way", noScripts, waited)
			}
		})
	}
}
