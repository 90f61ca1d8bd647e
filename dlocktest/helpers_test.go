package dlocktest_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"
)

// recorder is a testing.TB that records what a dlocktest function reports,
// for the tests of bad input: Fatalf and Skipf end the goroutine, as
// testing's do. Only the methods dlocktest calls are implemented.
type recorder struct {
	testing.TB // for its unexported method only

	mu       sync.Mutex
	fatal    string
	skipped  string
	cleanups []func()
}

func (r *recorder) Helper()                   {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Cleanup(f func())          { r.mu.Lock(); r.cleanups = append(r.cleanups, f); r.mu.Unlock() }
func (r *recorder) Fatal(args ...any)         { r.stop(&r.fatal, fmt.Sprint(args...)) }
func (r *recorder) Fatalf(f string, a ...any) { r.stop(&r.fatal, fmt.Sprintf(f, a...)) }
func (r *recorder) Skipf(f string, a ...any)  { r.stop(&r.skipped, fmt.Sprintf(f, a...)) }

func (r *recorder) stop(into *string, msg string) {
	r.mu.Lock()
	*into = msg
	r.mu.Unlock()
	runtime.Goexit()
}

// run calls f with r on a goroutine of its own, which Fatalf may end, then
// runs r's cleanups, and returns what was reported.
func (r *recorder) run(f func(t testing.TB)) (fatal, skipped string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	r.cleanups = nil
	return r.fatal, r.skipped
}
