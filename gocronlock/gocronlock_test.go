package gocronlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/gocronlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/go-co-op/gocron/v2"
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
	t.Parallel() // a server of its own
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
	s, err := gocron.NewScheduler()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	newJob := func(opt gocron.JobOption) func() error {
		return func() error {
			_, err := s.NewJob(gocron.DurationJob(time.Second), gocron.NewTask(func() {}), opt)
			return err
		}
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
		{"NewLocker nil logger", call(func() error { _, err := gocronlock.NewLocker(c, gocronlock.WithLogger(nil)); return err }), "WithLogger(nil)"},
		{"AlignedStart zero interval", newJob(gocronlock.AlignedStart(0)), "AlignedStart(0s): the interval must be positive"},
		{"AlignedStart negative interval", newJob(gocronlock.AlignedStart(-time.Minute)), "AlignedStart(-1m0s): the interval must be positive"},
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
	t.Parallel() // a server of its own
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
	t.Parallel() // a server of its own
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
	t.Parallel() // a server of its own
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

// TestLockerWarnsOnce: a Locker logs one warning, at the first refusal
// that came within the min hold of the job's last firing here, naming the
// job and the min hold; later refusals log nothing, of that job or
// another, and their errors say why. A refusal of a job not fired here
// before, or fired longer than the min hold ago (the run that holds its
// lock is still going), is not put down to the min hold.
func TestLockerWarnsOnce(t *testing.T) {
	t.Parallel() // a server of its own
	srv := redistest.Start(t)
	c := newClient(t, srv)
	ctx := context.Background()
	newLocker := func(d time.Duration) (*gocronlock.Locker, *bytes.Buffer) {
		t.Helper()
		var buf bytes.Buffer
		l, err := gocronlock.NewLocker(c, gocronlock.WithMinHold(d), gocronlock.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
		if err != nil {
			t.Fatal(err)
		}
		return l, &buf
	}
	warnings := func(buf *bytes.Buffer) []map[string]any {
		t.Helper()
		var out []map[string]any
		for line := range strings.Lines(buf.String()) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line %q: %v", line, err)
			}
			out = append(out, rec)
		}
		return out
	}
	refuse := func(l *gocronlock.Locker, job string, withinMinHold bool) {
		t.Helper()
		_, err := l.Lock(ctx, job)
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("Lock %q: %v, want ErrNotAcquired", job, err)
		}
		if strings.Contains(err.Error(), "min hold") != withinMinHold {
			t.Fatalf("Lock %q: %v: want an error that says the firing was within the min hold: %v", job, err, withinMinHold)
		}
	}

	// A run that lasts: refusals of a Locker that never fired the job, or
	// fired it longer than its min hold ago, log nothing.
	holder, _ := newLocker(0)
	long, err := holder.Lock(ctx, "long")
	if err != nil {
		t.Fatal(err)
	}
	short, shortLog := newLocker(100 * time.Millisecond)
	refuse(short, "long", false)
	time.Sleep(150 * time.Millisecond)
	refuse(short, "long", false)
	if err := short.Close(); err != nil {
		t.Fatal(err)
	}
	if err := long.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	if w := warnings(shortLog); len(w) != 0 {
		t.Fatalf("refusals not within the min hold logged %v", w)
	}

	// Runs that end at once, each fired again within the min hold.
	l, log := newLocker(time.Second)
	for _, job := range []string{"job", "job2"} {
		run, err := l.Lock(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		refuse(l, job, true)
		refuse(l, job, true)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	w := warnings(log)
	if len(w) != 1 {
		t.Fatalf("%d records logged in 4 refusals within the min hold, want 1: %v", len(w), w)
	}
	msg, _ := w[0]["msg"].(string)
	if w[0]["level"] != "WARN" || w[0]["job"] != "job" || w[0]["min_hold"] != "1s" ||
		!strings.Contains(msg, "interval") || !strings.Contains(msg, "alignment") {
		t.Fatalf("the warning %v: want level WARN, job \"job\", min_hold \"1s\", and a message that says to check the interval and the alignment", w[0])
	}
}

// TestAlignedStart: a DurationJob started with AlignedStart fires first on
// a multiple of its interval, the first one after the scheduler started
// (or the job was added to a running scheduler), whatever the interval.
func TestAlignedStart(t *testing.T) {
	s, err := gocron.NewScheduler()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	type added struct {
		job           gocron.Job
		d             time.Duration
		before, after time.Time // around the job's scheduling: Start, or NewJob once started
	}
	var jobs []added
	add := func(d time.Duration) {
		t.Helper()
		before := time.Now()
		j, err := s.NewJob(gocron.DurationJob(d), gocron.NewTask(func() {}), gocronlock.AlignedStart(d))
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, added{j, d, before, time.Now()})
	}
	add(time.Hour)
	add(7 * time.Minute)
	before := time.Now()
	s.Start()
	after := time.Now()
	for i := range jobs {
		jobs[i].before, jobs[i].after = before, after
	}
	add(24 * time.Hour)
	add(90 * time.Second)
	for _, a := range jobs {
		next, err := a.job.NextRun()
		if err != nil {
			t.Fatal(err)
		}
		if !next.Equal(next.Truncate(a.d)) || next.Before(a.before) || !next.Before(a.after.Add(a.d)) {
			t.Errorf("interval %v: the first run at %v, not the first multiple of %v after the job was scheduled (between %v and %v)", a.d, next, a.d, a.before, a.after)
		}
	}
}
