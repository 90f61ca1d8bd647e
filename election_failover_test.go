package dlock_test

// Elections across failovers: one Cluster and one Sentinel failover in the
// suite, DLOCK_FAILOVER_ROUNDS rounds each behind `make failover`.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// termLog follows an election with Observe, from a Client of its own, and
// checks what it saw: each term with one leader's value (no two leaders in
// one term), and never a term below one seen before.
type termLog struct {
	mu     sync.Mutex
	values map[int64]string // term -> the value first seen in it
	last   int64
	errs   []error
	stop   context.CancelFunc
	done   chan struct{}
}

func followTerms(el *dlock.Election) *termLog {
	ctx, cancel := context.WithCancel(context.Background())
	tl := &termLog{values: map[int64]string{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(tl.done)
		for l, err := range el.Observe(ctx) {
			if err != nil {
				continue // a failover: Observe reads again and goes on
			}
			tl.mu.Lock()
			if v, ok := tl.values[l.Term]; l.Term != 0 && ok && v != l.Value {
				tl.errs = append(tl.errs, fmt.Errorf("term %d led by %q and by %q", l.Term, v, l.Value))
			} else if l.Term != 0 && !ok {
				tl.values[l.Term] = l.Value
			}
			if l.Term != 0 && l.Term < tl.last {
				tl.errs = append(tl.errs, fmt.Errorf("term %d seen after term %d", l.Term, tl.last))
			}
			tl.last = max(tl.last, l.Term)
			tl.mu.Unlock()
		}
	}()
	return tl
}

// check stops the observer and fails t on what it found.
func (tl *termLog) check(t *testing.T) {
	t.Helper()
	tl.stop()
	<-tl.done
	for _, err := range tl.errs {
		t.Errorf("observed: %v", err)
	}
}

// TestElectionClusterFailover: a leader whose grant a Cluster shard's
// failover lost (each of DLOCK_FAILOVER_ROUNDS rounds, 1 by default: the
// replica promoted never got it) learns at its next renewal that its
// Leadership ended (ErrLockLost); the next leader's term is above its, though
// the new primary never saw that term; no term has two leaders.
func TestElectionClusterFailover(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	const ttl = 3 * time.Second
	a := clientOn(t, cl.Client(t), dlock.WithTTL(ttl))
	b := clientOn(t, cl.Client(t), dlock.WithTTL(ttl))
	for round := range failoverRounds(t, 1) {
		name := "el" + strconv.Itoa(round%3)
		tl := followTerms(clientOn(t, cl.Client(t)).Election(name))
		primary, err := cl.PrimaryFor(ctx, "dlock:election:{"+name+"}")
		if err != nil {
			t.Fatal(err)
		}
		var ld *dlock.Leadership
		if _, err := cl.LossyFailover(ctx, primary, func() error {
			ld, err = a.Election(name).Campaign(ctx, "a")
			return err
		}); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !closedWithin(ld.Done(), ttl) {
			t.Fatalf("round %d: the leader whose grant the failover lost still leads a TTL later", round)
		}
		if !errors.Is(ld.Err(), dlock.ErrLockLost) {
			t.Errorf("round %d: Err %v, want ErrLockLost", round, ld.Err())
		}
		var next *dlock.Leadership
		if !within(10*time.Second, func() bool {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			next, err = b.Election(name).Campaign(cctx, "b")
			return err == nil
		}) {
			t.Fatalf("round %d: no Campaign won after the failover: %v", round, err)
		}
		if next.Term() <= ld.Term() {
			t.Errorf("round %d: term %d after the lost term %d: the promoted replica went back", round, next.Term(), ld.Term())
		}
		mustLead(t, b.Election(name), "b", next.Term())
		if err := next.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		tl.check(t)
		t.Logf("round %d: terms %d -> %d", round, ld.Term(), next.Term())
		if err := cl.Rejoin(ctx, primary); err != nil {
			t.Fatalf("round %d: rejoin: %v", round, err)
		}
	}
}

// TestElectionSentinelFailover: with WithWaitReplicas, a leader keeps leading
// across a SENTINEL FAILOVER (each of DLOCK_FAILOVER_ROUNDS rounds, 1 by
// default), its term and value unchanged on the new primary, while the
// candidate in line keeps waiting; its Resign then hands over to that
// candidate, whose Campaign returns only after the Resign began, with a
// higher term; no term has two leaders.
func TestElectionSentinelFailover(t *testing.T) {
	t.Parallel() // most of its time is the sentinels' timers
	s := redistest.StartSentinel(t, 2, 3)
	ctx := context.Background()
	const ttl = 10 * time.Second // longer than a failover takes
	opts := []dlock.Option{dlock.WithTTL(ttl), dlock.WithWaitReplicas(1, time.Second)}
	a := clientOn(t, s.Client(t), opts...)
	b := clientOn(t, s.Client(t), opts...)
	tl := followTerms(clientOn(t, s.Client(t)).Election("e"))
	var last int64
	for round := range failoverRounds(t, 1) {
		av, bv := "a"+strconv.Itoa(round), "b"+strconv.Itoa(round)
		ld, err := a.Election("e").Campaign(ctx, av)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if ld.Term() <= last {
			t.Fatalf("round %d: term %d after %d", round, ld.Term(), last)
		}
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		next := campaignAsync(wctx, b.Election("e"), bv)
		if !within(10*time.Second, func() bool {
			st, err := a.Inspect(ctx, dlock.KindElection, "e")
			return err == nil && len(st.Waiters) == 1
		}) {
			t.Fatalf("round %d: the second candidate never stood in line", round)
		}
		promoted, err := s.Failover(ctx)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var l dlock.Leader
		if !within(10*time.Second, func() bool {
			l, err = a.Election("e").Leader(ctx)
			return err == nil
		}) {
			t.Fatalf("round %d: no Leader read after the failover: %v", round, err)
		}
		if l.Term != ld.Term() || l.Value != av {
			t.Fatalf("round %d: after the failover to %s the leader is %+v, want %q in term %d", round, promoted.Addr, l, av, ld.Term())
		}
		select {
		case <-ld.Done():
			t.Fatalf("round %d: the Leadership ended across the failover: %v", round, ld.Err())
		case r := <-next:
			t.Fatalf("round %d: the candidate in line won across the failover while the leader led: %+v", round, r)
		default:
		}
		resigned := time.Now()
		if err := ld.Resign(ctx); err != nil {
			t.Fatalf("round %d: Resign after the failover: %v", round, err)
		}
		r := <-next
		cancel()
		if r.err != nil {
			t.Fatalf("round %d: the candidate in line: %v", round, r.err)
		}
		if r.at.Before(resigned) {
			t.Errorf("round %d: the next Campaign returned before the leader resigned", round)
		}
		if r.ld.Term() <= ld.Term() {
			t.Errorf("round %d: term %d after %d", round, r.ld.Term(), ld.Term())
		}
		mustLead(t, a.Election("e"), bv, r.ld.Term())
		last = r.ld.Term()
		if err := r.ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: promoted %s; terms %d -> %d", round, promoted.Addr, ld.Term(), r.ld.Term())
	}
	tl.check(t)
}
