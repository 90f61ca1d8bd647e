package renew

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// closedSoon reports whether c is closed within a second.
func closedSoon(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	case <-time.After(time.Second):
		return false
	}
}

// isClosed reports whether c is closed now.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestEndingCause: an ending has no cause and no Err until it ends; the first
// end says why, and the ends after it change nothing.
func TestEndingCause(t *testing.T) {
	var e ending
	if e.Cause() != nil || e.Err() != nil {
		t.Fatalf("before the end: cause %v, Err %v", e.Cause(), e.Err())
	}
	first, second := errors.New("first"), errors.New("second")
	if !e.End(first) {
		t.Error("the first end reports false")
	}
	if e.End(second) {
		t.Error("a second end reports true")
	}
	if e.Cause() != first || e.Err() != context.Canceled {
		t.Errorf("after the end: cause %v, Err %v; want first, context.Canceled", e.Cause(), e.Err())
	}
	if d, ok := e.Deadline(); ok || !d.IsZero() || e.Value(anyKey{}) != nil {
		t.Errorf("Deadline %v %v, Value %v", d, ok, e.Value(anyKey{}))
	}

	var n ending
	n.End(nil)
	if n.Cause() != context.Canceled {
		t.Errorf("ended without a cause: cause %v", n.Cause())
	}

	// Of ends that race, exactly one wins, and its cause stays.
	var r ending
	causes := make([]error, 8)
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range causes {
		causes[i] = errors.New("racer")
		wg.Go(func() {
			_ = r.Done()
			if r.End(causes[i]) {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Errorf("%d ends won", wins.Load())
	}
	won := false
	for _, c := range causes {
		won = won || r.Cause() == c
	}
	if !won || !isClosed(r.Done()) {
		t.Errorf("after racing ends: cause %v, Done closed %v", r.Cause(), isClosed(r.Done()))
	}
}

// TestEndingDone: Done makes one channel, open until the end and closed at
// it; an ending that ended before anyone asked makes none.
func TestEndingDone(t *testing.T) {
	var e ending
	if e.done != nil {
		t.Fatal("a new ending has a channel")
	}
	d := e.Done()
	if d == nil || e.Done() != d || isClosed(d) {
		t.Fatal("Done before the end: not one open channel")
	}
	e.End(errors.New("x"))
	if !isClosed(d) || e.Done() != d {
		t.Error("Done after the end: not the same channel, closed")
	}

	var late ending
	late.End(errors.New("x"))
	if c := late.Done(); !isClosed(c) || late.done != nil {
		t.Errorf("Done after an end nobody waited for: closed %v, made a channel %v", isClosed(c), late.done != nil)
	}
}

// TestEndingAfterFunc: a function runs once, on a goroutine of its own, after
// the end, and not before; stop keeps it from running, and says so only
// then; a function arranged after the end runs at once.
func TestEndingAfterFunc(t *testing.T) {
	var e ending
	var runs [3]atomic.Int32
	ran := [3]chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	var stops [3]func() bool
	for i := range stops {
		stops[i] = e.AfterFunc(func() {
			if runs[i].Add(1) == 1 {
				close(ran[i])
			}
		})
	}
	if !stops[1]() {
		t.Error("stop before the end reports false")
	}
	if stops[1]() {
		t.Error("a second stop reports true")
	}
	time.Sleep(10 * time.Millisecond)
	for i := range runs {
		if runs[i].Load() != 0 {
			t.Fatalf("f %d ran before the end", i)
		}
	}

	// f runs on its own goroutine: end does not wait for it, and f may
	// block on what end's caller holds.
	var mu sync.Mutex
	mu.Lock()
	blocked := e.AfterFunc(func() { mu.Lock(); mu.Unlock() })
	e.End(errors.New("x"))
	mu.Unlock()
	if blocked() {
		t.Error("stop after the end reports true")
	}

	for _, i := range []int{0, 2} {
		if !closedSoon(ran[i]) {
			t.Fatalf("f %d did not run after the end", i)
		}
		if stops[i]() {
			t.Errorf("stop of f %d, which ran, reports true", i)
		}
	}
	time.Sleep(10 * time.Millisecond)
	for i, want := range []int32{1, 0, 1} {
		if got := runs[i].Load(); got != want {
			t.Errorf("f %d ran %d times, want %d", i, got, want)
		}
	}
	if e.afters != nil {
		t.Error("functions left in the list after the end")
	}

	late := make(chan struct{})
	stop := e.AfterFunc(func() { close(late) })
	if !closedSoon(late) {
		t.Fatal("f arranged after the end did not run")
	}
	if stop() {
		t.Error("stop of f arranged after the end reports true")
	}
}

// TestEndingAfterFuncRace: stops and ends that race run each function at
// most once, and exactly once unless its stop reported true.
func TestEndingAfterFuncRace(t *testing.T) {
	for range 50 {
		var e ending
		const n = 8
		var runs [n]atomic.Int32
		var stopped [n]atomic.Bool
		var wg sync.WaitGroup
		stops := make([]func() bool, n)
		for i := range n {
			stops[i] = e.AfterFunc(func() { runs[i].Add(1) })
		}
		for i := range n {
			wg.Go(func() { stopped[i].Store(stops[i]()) })
		}
		wg.Go(func() { e.End(errors.New("x")) })
		wg.Wait()
		deadline := time.Now().Add(time.Second)
		for i := range n {
			want := int32(1)
			if stopped[i].Load() {
				want = 0
			}
			for runs[i].Load() != want && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if got := runs[i].Load(); got != want {
				t.Fatalf("f %d ran %d times, stopped %v", i, got, stopped[i].Load())
			}
		}
	}
}

// TestEndingContext: the standard library's context.AfterFunc and the
// contexts derived from an ending use its AfterFunc, with no goroutine
// waiting on the way, and let go of it when stopped or cancelled.
func TestEndingContext(t *testing.T) {
	var e ending
	before := runtime.NumGoroutine()

	ran := make(chan struct{})
	context.AfterFunc(&e, func() { close(ran) })
	stopped := make(chan struct{})
	stop := context.AfterFunc(&e, func() { close(stopped) })
	child, cancelChild := context.WithCancelCause(&e)
	gone, cancelGone := context.WithCancel(&e)
	var derived []context.CancelFunc
	for range 20 {
		_, cancel := context.WithCancel(&e)
		derived = append(derived, cancel)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines while waiting for the end, %d before", n, before)
	}
	for _, cancel := range derived {
		cancel()
	}
	cancelGone()
	if !stop() {
		t.Error("stop of context.AfterFunc before the end reports false")
	}
	count := 0
	e.mu.Lock()
	for a := e.afters; a != nil; a = a.next {
		count++
	}
	e.mu.Unlock()
	if count != 2 { // context.AfterFunc's ran, and child
		t.Errorf("%d functions waiting, want 2", count)
	}
	if child.Err() != nil || gone.Err() != context.Canceled {
		t.Fatalf("before the end: child %v, cancelled child %v", child.Err(), gone.Err())
	}

	cause := errors.New("lost")
	e.End(cause)
	if !closedSoon(ran) {
		t.Fatal("context.AfterFunc: f did not run after the end")
	}
	if !closedSoon(child.Done()) || child.Err() != context.Canceled {
		t.Fatalf("derived context after the end: Err %v", child.Err())
	}
	if isClosed(stopped) {
		t.Error("context.AfterFunc: f ran after stop")
	}
	cancelChild(nil)

	// Derived after the end: done at once.
	late, cancelLate := context.WithCancel(&e)
	defer cancelLate()
	if !isClosed(late.Done()) {
		t.Error("context derived after the end is not done")
	}
}

// anyKey is a context key no one stores a value under.
type anyKey struct{}
