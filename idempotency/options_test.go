package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/idempotency"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestOptions: every Option is one type, taken by New (for every Do and
// Middleware of the Store) and by Middleware (for that one, over the
// Store's): RequireKey given to New makes every Middleware require a key;
// WithoutWaiting and MaxBody given to one Middleware apply to it alone; a
// bad Option is an error in both places.
func TestOptions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, err := dlock.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	s, err := idempotency.New(c, rdb, idempotency.RequireKey())
	if err != nil {
		t.Fatal(err)
	}
	// The handler holds a request with the key "k" until release is closed.
	var runs atomic.Int64
	started, release := make(chan struct{}, 1), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		if r.Header.Get(idempotency.Header) == "k" {
			started <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})
	waiting := httptest.NewServer(s.Middleware(h))
	t.Cleanup(waiting.Close)
	refusing := httptest.NewServer(s.Middleware(h, idempotency.WithoutWaiting(), idempotency.MaxBody(4)))
	t.Cleanup(refusing.Close)

	for _, url := range []string{waiting.URL, refusing.URL} {
		if r := post(t, url, "", "a"); r.status != http.StatusBadRequest {
			t.Errorf("no key, with RequireKey given to New: %d, want 400", r.status)
		}
	}
	if r := post(t, refusing.URL, "big", "12345"); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over MaxBody(4) given to the Middleware: %d, want 413", r.status)
	}
	if r := post(t, waiting.URL, "big", "12345"); r.status != http.StatusCreated {
		t.Errorf("the same body to a Middleware without MaxBody: %d, want 201", r.status)
	}

	first, duplicate := make(chan reply, 1), make(chan reply, 1)
	go func() { first <- post(t, waiting.URL, "k", "a") }()
	<-started
	if r := post(t, refusing.URL, "k", "a"); r.status != http.StatusConflict {
		t.Errorf("a duplicate to the Middleware given WithoutWaiting: %d, want 409", r.status)
	}
	go func() { duplicate <- post(t, waiting.URL, "k", "a") }()
	close(release)
	if r := <-first; r.status != http.StatusCreated || r.replayed {
		t.Errorf("the first request: %+v, want 201", r)
	}
	if r := <-duplicate; r.status != http.StatusCreated || !r.replayed {
		t.Errorf("a duplicate to the Middleware that waits: %+v, want the first response replayed", r)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2 (\"big\" and \"k\")", n)
	}

	for _, o := range []idempotency.Option{idempotency.MaxBody(-1), idempotency.WithKeep(0), nil} {
		if _, err := idempotency.New(c, rdb, o); err == nil {
			t.Error("New accepted a bad Option")
		}
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("a"))
		req.Header.Set(idempotency.Header, "bad")
		s.Middleware(h, o).ServeHTTP(w, req)
		if w.Code != http.StatusInternalServerError {
			t.Errorf("Middleware with a bad Option answers %d, want 500", w.Code)
		}
	}
}
