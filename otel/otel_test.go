package dlockotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	dlockotel "github.com/dlock-go/dlock/otel"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestMain(m *testing.M) { redistest.Main(m, 1) }

// env is a dlock Client instrumented with SDK providers whose data the test
// reads.
type env struct {
	srv    *redistest.Server
	rdb    *redis.Client
	c      *dlock.Client
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newEnv(t *testing.T, opts ...dlock.Option) *env {
	t.Helper()
	e := &env{srv: redistest.Start(t), reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	e.rdb = e.srv.Client(t)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = e.tp.Shutdown(context.Background())
	})
	hooks := dlockotel.Hooks(dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(e.tp))
	c, err := dlock.New(e.rdb, append(opts, dlock.WithHooks(hooks))...)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	t.Cleanup(func() { c.Close() })
	return e
}

// point is one data point of a collection, with its attributes as a map.
type point struct {
	attrs map[string]any
	count uint64 // of a histogram
	sum   float64
	value int64 // of a counter
}

// collect returns the data points of each metric, by name, and fails the
// test if any attribute of any point has one of names for its value.
func (e *env) collect(t *testing.T, names ...string) map[string][]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := make(map[string][]point)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != dlockotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, dlockotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					got[m.Name] = append(got[m.Name], point{attrs: attrMap(dp.Attributes), count: dp.Count, sum: dp.Sum})
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] = append(got[m.Name], point{attrs: attrMap(dp.Attributes), value: dp.Value})
				}
			default:
				t.Errorf("metric %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	for metric, points := range got {
		for _, p := range points {
			for k, v := range p.attrs {
				for _, n := range names {
					if v == n || k == "dlock.lock.name" {
						t.Errorf("metric %s has attribute %s=%v: lock names must not be metric attributes", metric, k, v)
					}
				}
			}
		}
	}
	return got
}

func attrMap(s attribute.Set) map[string]any {
	m := make(map[string]any)
	for _, kv := range s.ToSlice() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// find returns the point of metric whose attributes are attrs exactly.
func find(t *testing.T, got map[string][]point, metric string, attrs map[string]any) (point, bool) {
	t.Helper()
	for _, p := range got[metric] {
		if sameAttrs(p.attrs, attrs) {
			return p, true
		}
	}
	return point{}, false
}

func sameAttrs(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// only checks that metric has exactly one point, with attrs, and returns it.
func only(t *testing.T, got map[string][]point, metric string, attrs map[string]any) point {
	t.Helper()
	if n := len(got[metric]); n != 1 {
		t.Fatalf("%s: %d points %v, want 1 with %v", metric, n, got[metric], attrs)
	}
	p, ok := find(t, got, metric, attrs)
	if !ok {
		t.Fatalf("%s: point %v, want attributes %v", metric, got[metric][0].attrs, attrs)
	}
	return p
}

// spansNamed returns the ended spans called name.
func (e *env) spansNamed(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func checkSpanAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]any) {
	t.Helper()
	got := make(map[string]any)
	for _, kv := range s.Attributes() {
		got[string(kv.Key)] = kv.Value.AsInterface()
	}
	if !sameAttrs(got, want) {
		t.Errorf("span %q attributes %v, want %v", s.Name(), got, want)
	}
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, ev := range s.Events() {
		if ev.Name == name {
			return true
		}
	}
	return false
}

func TestLockUnlock(t *testing.T) {
	e := newEnv(t)
	ctx, parent := e.tp.Tracer("test").Start(context.Background(), "parent")
	const name = "order:42"
	l, err := e.c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	parent.End()

	locks, unlocks := e.spansNamed("dlock lock"), e.spansNamed("dlock unlock")
	if len(locks) != 1 || len(unlocks) != 1 {
		t.Fatalf("%d lock and %d unlock spans, want 1 each", len(locks), len(unlocks))
	}
	for _, s := range []sdktrace.ReadOnlySpan{locks[0], unlocks[0]} {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %q is not a child of the context's span", s.Name())
		}
		if s.Status().Code != codes.Unset {
			t.Errorf("span %q status %v, want unset", s.Name(), s.Status())
		}
	}
	checkSpanAttrs(t, locks[0], map[string]any{
		"dlock.lock.name": name, "dlock.lock.kind": "Mutex", "dlock.op": "lock", "dlock.outcome": "acquired",
		"dlock.fence": l.Fence(), "dlock.reentered": false, "dlock.handed_off": false,
	})
	checkSpanAttrs(t, unlocks[0], map[string]any{
		"dlock.lock.name": name, "dlock.lock.kind": "Mutex", "dlock.outcome": "ok",
		"dlock.fence": l.Fence(), "dlock.last_hold": true,
	})
	if hasEvent(locks[0], "contended") {
		t.Error("uncontended lock span has a contended event")
	}

	got := e.collect(t, name)
	p := only(t, got, "dlock.lock.acquire.duration", map[string]any{"dlock.lock.kind": "Mutex", "dlock.op": "lock", "dlock.outcome": "acquired"})
	if p.count != 1 {
		t.Errorf("acquire.duration count %d, want 1", p.count)
	}
	p = only(t, got, "dlock.lock.hold.duration", map[string]any{"dlock.lock.kind": "Mutex", "dlock.outcome": "ok"})
	if p.count != 1 || p.sum <= 0 {
		t.Errorf("hold.duration count %d sum %v, want 1 and above 0", p.count, p.sum)
	}
	for _, m := range []string{"dlock.lock.contentions", "dlock.lock.handoffs", "dlock.lease.lost"} {
		if len(got[m]) != 0 {
			t.Errorf("%s: %v, want nothing", m, got[m])
		}
	}
}

func TestReentered(t *testing.T) {
	e := newEnv(t)
	const name = "job:reentered"
	ctx := context.Background()
	m := e.c.Mutex(name)
	outer, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := outer.Context(ctx)
	defer cancel()
	inner, err := m.Lock(lctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	got := e.collect(t, name)
	if len(got["dlock.lock.hold.duration"]) != 0 {
		t.Errorf("hold.duration recorded for giving back one hold of two: %v", got["dlock.lock.hold.duration"])
	}
	if err := outer.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	got = e.collect(t, name)
	for _, outcome := range []string{"acquired", "reentered"} {
		p, ok := find(t, got, "dlock.lock.acquire.duration", map[string]any{"dlock.lock.kind": "Mutex", "dlock.op": "lock", "dlock.outcome": outcome})
		if !ok || p.count != 1 {
			t.Errorf("acquire.duration with outcome %s: %v, want count 1", outcome, got["dlock.lock.acquire.duration"])
		}
	}
	p := only(t, got, "dlock.lock.hold.duration", map[string]any{"dlock.lock.kind": "Mutex", "dlock.outcome": "ok"})
	if p.count != 1 {
		t.Errorf("hold.duration count %d, want 1", p.count)
	}
	var reentered int
	for _, s := range e.spansNamed("dlock lock") {
		for _, kv := range s.Attributes() {
			if kv.Key == "dlock.reentered" && kv.Value.AsBool() {
				reentered++
			}
		}
	}
	if reentered != 1 {
		t.Errorf("%d lock spans with dlock.reentered true, want 1", reentered)
	}
}

func TestNotAcquired(t *testing.T) {
	tests := []struct {
		op      string
		lock    func(ctx context.Context, m *dlock.Mutex) (*dlock.Lease, error)
		outcome string
	}{
		{"trylock", func(ctx context.Context, m *dlock.Mutex) (*dlock.Lease, error) { return m.TryLock(ctx) }, "not_acquired"},
		{"lock", func(ctx context.Context, m *dlock.Mutex) (*dlock.Lease, error) {
			ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			return m.Lock(ctx)
		}, "canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			e := newEnv(t)
			const name = "batch:nightly"
			ctx := context.Background()
			held, err := e.c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer held.Unlock(ctx)
			// Not the holder: its context carries no lease.
			if _, err := tt.lock(ctx, e.c.Mutex(name)); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("%s of a held lock: %v, want ErrNotAcquired", tt.op, err)
			}

			got := e.collect(t, name)
			p, ok := find(t, got, "dlock.lock.acquire.duration", map[string]any{"dlock.lock.kind": "Mutex", "dlock.op": tt.op, "dlock.outcome": tt.outcome})
			if !ok || p.count != 1 {
				t.Errorf("acquire.duration: %v, want count 1 with op %s, outcome %s", got["dlock.lock.acquire.duration"], tt.op, tt.outcome)
			}
			spans := e.spansNamed("dlock " + tt.op)
			if tt.op == "lock" {
				spans = spans[1:] // the holder's
			}
			if len(spans) != 1 {
				t.Fatalf("%d spans of the failed %s, want 1", len(spans), tt.op)
			}
			s := spans[0]
			checkSpanAttrs(t, s, map[string]any{"dlock.lock.name": name, "dlock.lock.kind": "Mutex", "dlock.op": tt.op, "dlock.outcome": tt.outcome})
			if s.Status().Code != codes.Unset || hasEvent(s, "exception") {
				t.Errorf("span status %v, events %v: want unset, no exception", s.Status(), s.Events())
			}
		})
	}
}

func TestRedisDown(t *testing.T) {
	e := newEnv(t)
	const name = "order:down"
	_ = e.srv.Kill()
	if _, err := e.c.Mutex(name).TryLock(context.Background()); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock with Redis down: %v, want an error other than ErrNotAcquired", err)
	}
	got := e.collect(t, name)
	only(t, got, "dlock.lock.acquire.duration", map[string]any{"dlock.lock.kind": "Mutex", "dlock.op": "trylock", "dlock.outcome": "error"})
	spans := e.spansNamed("dlock trylock")
	if len(spans) != 1 {
		t.Fatalf("%d trylock spans, want 1", len(spans))
	}
	if s := spans[0]; s.Status().Code != codes.Error || !hasEvent(s, "exception") {
		t.Errorf("span status %v, events %v: want error, with an exception event", s.Status(), s.Events())
	}
}

func TestHandoff(t *testing.T) {
	e := newEnv(t)
	const name = "order:handoff"
	ctx := context.Background()
	holder, err := e.c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *dlock.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := e.c.Mutex(name).Lock(ctx)
		done <- result{l, err}
	}()
	// Release only once the waiter is registered in Redis, so that the
	// release hands the lock to it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		n, err := e.rdb.ZCard(ctx, "dlock:{"+name+"}:waiters").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter did not register")
		}
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if err := r.l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	got := e.collect(t, name)
	lockAttrs := map[string]any{"dlock.lock.kind": "Mutex", "dlock.op": "lock"}
	if p := only(t, got, "dlock.lock.contentions", lockAttrs); p.value != 1 {
		t.Errorf("contentions %d, want 1", p.value)
	}
	if p := only(t, got, "dlock.lock.handoffs", lockAttrs); p.value != 1 {
		t.Errorf("handoffs %d, want 1", p.value)
	}
	p, ok := find(t, got, "dlock.lock.acquire.duration", map[string]any{"dlock.lock.kind": "Mutex", "dlock.op": "lock", "dlock.outcome": "acquired"})
	if !ok || p.count != 2 {
		t.Errorf("acquire.duration: %v, want count 2 acquired", got["dlock.lock.acquire.duration"])
	}
	var waiter sdktrace.ReadOnlySpan
	for _, s := range e.spansNamed("dlock lock") {
		if hasEvent(s, "contended") {
			if waiter != nil {
				t.Fatal("two lock spans with a contended event, want 1")
			}
			waiter = s
		}
	}
	if waiter == nil {
		t.Fatal("no lock span with a contended event")
	}
	checkSpanAttrs(t, waiter, map[string]any{
		"dlock.lock.name": name, "dlock.lock.kind": "Mutex", "dlock.op": "lock", "dlock.outcome": "acquired",
		"dlock.fence": r.l.Fence(), "dlock.reentered": false, "dlock.handed_off": true,
	})
}

func TestRenewals(t *testing.T) {
	e := newEnv(t, dlock.WithTTL(300*time.Millisecond))
	const name = "order:renewed"
	ctx := context.Background()
	l, err := e.c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	e.c.Close() // waits for the hook calls of the renewals

	got := e.collect(t, name)
	p, ok := find(t, got, "dlock.lease.renewals", map[string]any{"dlock.lock.kind": "Mutex", "dlock.outcome": "ok"})
	if !ok || p.value < 1 {
		t.Errorf("renewals: %v, want at least 1 ok", got["dlock.lease.renewals"])
	}
	if len(got["dlock.lease.lost"]) != 0 {
		t.Errorf("lost: %v, want nothing", got["dlock.lease.lost"])
	}
}

func TestLost(t *testing.T) {
	e := newEnv(t, dlock.WithTTL(300*time.Millisecond))
	const name = "order:lost"
	ctx := context.Background()
	l, err := e.c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Del(ctx, "dlock:{"+name+"}").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the lease did not end after its key was deleted")
	}
	if !errors.Is(l.Err(), dlock.ErrLockLost) {
		t.Fatalf("lease error %v, want ErrLockLost", l.Err())
	}
	if err := l.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lost lease: %v, want ErrNotHeld", err)
	}
	e.c.Close() // waits for the Lost hook

	got := e.collect(t, name)
	if p := only(t, got, "dlock.lease.lost", map[string]any{"dlock.lock.kind": "Mutex"}); p.value != 1 {
		t.Errorf("lost %d, want 1", p.value)
	}
	if len(got["dlock.lock.hold.duration"]) != 0 {
		t.Errorf("hold.duration recorded for an Unlock of a lost lease: %v", got["dlock.lock.hold.duration"])
	}
	unlocks := e.spansNamed("dlock unlock")
	if len(unlocks) != 1 || unlocks[0].Status().Code != codes.Error {
		t.Errorf("unlock spans %v, want 1 with status error", unlocks)
	}
}

// TestElectionTerms: dlock.election.terms counts each term a Campaign
// gained, each one Resign or Close resigned and each one lost, here to a
// ForceRelease, which the leader learns of at its next renewal.
func TestElectionTerms(t *testing.T) {
	e := newEnv(t, dlock.WithTTL(300*time.Millisecond))
	const name = "scheduler"
	ctx := context.Background()
	el := e.c.Election(name)
	terms := func(want map[string]int64) {
		t.Helper()
		got := e.collect(t, name)
		for _, p := range got["dlock.election.terms"] {
			o, _ := p.attrs["dlock.outcome"].(string)
			if len(p.attrs) != 1 || p.value != want[o] {
				t.Errorf("dlock.election.terms %v = %d, want %d", p.attrs, p.value, want[o])
			}
			delete(want, o)
		}
		for o, n := range want {
			if n != 0 {
				t.Errorf("dlock.election.terms: no point with outcome %s, want %d", o, n)
			}
		}
	}

	a, err := el.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	terms(map[string]int64{"gained": 1})
	if err := a.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	// Counted on Resign's goroutine, before it returned.
	terms(map[string]int64{"gained": 1, "resigned": 1})

	b, err := el.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.ForceRelease(ctx, dlock.KindElection, name); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the leadership taken away by ForceRelease did not end")
	}
	if !errors.Is(b.Err(), dlock.ErrLockLost) {
		t.Fatalf("Err of the evicted leadership: %v, want ErrLockLost", b.Err())
	}

	if _, err := el.Campaign(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	e.c.Close() // resigns c, and waits for the hook calls of the loss
	terms(map[string]int64{"gained": 3, "resigned": 2, "lost": 1})
	got := e.collect(t, name)
	if p := only(t, got, "dlock.lease.lost", map[string]any{"dlock.lock.kind": "Election"}); p.value != 1 {
		t.Errorf("lost %d, want 1", p.value)
	}
	p, ok := find(t, got, "dlock.lock.acquire.duration", map[string]any{"dlock.lock.kind": "Election", "dlock.op": "campaign", "dlock.outcome": "acquired"})
	if !ok || p.count != 3 {
		t.Errorf("acquire.duration: %v, want count 3 campaigns acquired", got["dlock.lock.acquire.duration"])
	}
}
