package dlocktest_test

// The code of docs/testing.md, kept compiling and passing here: a change to
// one is made to the other.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/lockhttp"
)

// --- 1. A job under a Mutex that stops when its lease is lost

// reindex processes items under the "reindex" lock, one at a time, each
// with the lock's context, and stops once the lock is lost. It returns how
// many items it processed.
func reindex(ctx context.Context, c *dlock.Client, items []string, process func(context.Context, string) error) (int, error) {
	done := 0
	err := c.Mutex("reindex").Do(ctx, func(ctx context.Context) error {
		for _, item := range items {
			if err := process(ctx, item); err != nil {
				return err
			}
			done++
		}
		return nil
	})
	return done, err
}

func TestReindexStopsWhenLockLost(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := context.Background()

	var seen []string
	process := func(ctx context.Context, item string) error {
		seen = append(seen, item)
		if item == "b" {
			lease, _ := dlock.LeaseFromContext(ctx)
			dlocktest.Lose(t, lease) // the lease runs out while b is processed
			<-ctx.Done()             // b is slow: it ends when its context does
			return context.Cause(ctx)
		}
		return nil
	}
	done, err := reindex(ctx, srv.Client, []string{"a", "b", "c"}, process)
	if done != 1 || len(seen) != 2 || !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("reindex = %d, %v after %v; want a done, b stopped by ErrLockLost, c not begun", done, err, seen)
	}
}

// --- 2. A handler under lockhttp, tested for its busy answer

func refunds(c *dlock.Client) http.Handler {
	refund := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lease, _ := lockhttp.FromContext(r.Context())
		fmt.Fprintf(w, "refunded order %s (fence %d)", r.PathValue("order"), lease.Fence())
	})
	name := func(r *http.Request) (string, error) { return "refund:" + r.PathValue("order"), nil }
	mux := http.NewServeMux()
	mux.Handle("POST /orders/{order}/refund", lockhttp.Handler(c, name, refund, lockhttp.NoWait()))
	return mux
}

func TestRefundBusy(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := context.Background()
	h := refunds(srv.Client)

	// Another process is refunding order 42.
	other, err := srv.Client.Mutex("refund:42").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/orders/42/refund", nil))
	if w.Code != http.StatusConflict || w.Header().Get("Retry-After") == "" {
		t.Fatalf("while order 42 is locked: %d %q, want 409 with Retry-After", w.Code, w.Body)
	}

	// That process dies; its lease runs out.
	dlocktest.Lose(t, other)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/orders/42/refund", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("after the other lease was lost: %d %q, want 200", w.Code, w.Body)
	}
}

// --- 3. An Election leader that steps down

// schedule campaigns to lead the "scheduler" election, then runs tick at
// each tick while it leads (with the leadership, whose Term fences what tick
// writes) and stops once the leadership ends. It returns why it stopped.
func schedule(ctx context.Context, c *dlock.Client, node string, ticks <-chan time.Time, tick func(context.Context, *dlock.Leadership)) error {
	ld, err := c.Election("scheduler").Campaign(ctx, node)
	if err != nil {
		return err
	}
	lctx, cancel := ld.Context(ctx)
	defer cancel()
	for lctx.Err() == nil {
		select {
		case <-lctx.Done():
		case <-ticks:
			tick(lctx, ld)
		}
	}
	if err := ld.Resign(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, dlock.ErrLockLost) {
		return err
	}
	return context.Cause(lctx)
}

func TestSchedulerStepsDown(t *testing.T) {
	srv := dlocktest.NewServer(t)
	ctx := context.Background()

	ticks := make(chan time.Time, 5)
	for range 5 {
		ticks <- time.Now()
	}
	n := 0
	err := schedule(ctx, srv.Client, "node-1", ticks, func(ctx context.Context, ld *dlock.Leadership) {
		n++
		if n == 3 {
			dlocktest.Steal(t, ld) // another node takes over during the third tick
			<-ctx.Done()           // which ends with the leadership
		}
	})
	if n != 3 || !errors.Is(err, dlock.ErrLockLost) {
		t.Fatalf("schedule = %v after %d ticks; want ErrLockLost during the third", err, n)
	}
	leader, err := srv.Client.Election("scheduler").Leader(ctx)
	if err != nil || leader.Value == "node-1" {
		t.Fatalf("leader after stepping down: %+v, %v", leader, err)
	}
}

// TestDocsInSync: every Go block of docs/testing.md is code of this
// package's tests or examples, word for word (leading tabs aside), so that
// the page's code compiles and passes with them.
func TestDocsInSync(t *testing.T) {
	page, err := os.ReadFile("../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	for _, f := range []string{"docs_test.go", "example_test.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	flat := func(s string) string {
		var b strings.Builder
		for line := range strings.Lines(s) {
			b.WriteString(strings.TrimLeft(line, "\t"))
		}
		return b.String()
	}
	src := flat(code.String())
	blocks := strings.Split(string(page), "```go\n")[1:]
	if len(blocks) == 0 {
		t.Fatal("no Go blocks in docs/testing.md")
	}
	for _, b := range blocks {
		block, _, _ := strings.Cut(b, "```")
		if !strings.Contains(src, flat(block)) {
			t.Errorf("docs/testing.md has code that is not in the tests:\n%s", block)
		}
	}
}
