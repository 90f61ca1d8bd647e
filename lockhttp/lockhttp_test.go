package lockhttp_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/lockhttp"
)

func TestMain(m *testing.M) {
	redistest.Main(m, 1)
}

// byOrder names the lock after the request's "order" query parameter.
func byOrder(r *http.Request) (string, error) {
	id := r.URL.Query().Get("order")
	if id == "" {
		return "", errors.New("missing order")
	}
	return "order:" + id, nil
}

func client(t *testing.T, srv *redistest.Server) *dlock.Client {
	t.Helper()
	c, err := dlock.New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("GET: %v", err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestOneAtATime: requests for one order, sent at once to two servers (two
// Clients), run one at a time; requests for another order run beside them.
// The handler sees the lease and its fence.
func TestOneAtATime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var inside, overlaps atomic.Int32
	var fences sync.Map
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, ok := lockhttp.FromContext(r.Context())
		if !ok {
			t.Error("no lease in the handler's context")
			return
		}
		fences.Store(l.Fence(), true)
		if r.URL.Query().Get("order") == "1" {
			if inside.Add(1) > 1 {
				overlaps.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
			inside.Add(-1)
		}
		fmt.Fprint(w, "ok")
	})
	var urls []string
	for range 2 {
		ts := httptest.NewServer(lockhttp.Handler(client(t, srv), byOrder, h))
		t.Cleanup(ts.Close)
		urls = append(urls, ts.URL)
	}
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			order := "1"
			if i%3 == 0 {
				order = "2"
			}
			if code, body := get(t, urls[i%2]+"/?order="+order); code != http.StatusOK {
				t.Errorf("status %d: %s", code, body)
			}
		})
	}
	wg.Wait()
	if overlaps.Load() > 0 {
		t.Errorf("%d requests for one order overlapped", overlaps.Load())
	}
	n := 0
	fences.Range(func(any, any) bool { n++; return true })
	if n != 30 {
		t.Errorf("%d distinct fences for 30 requests", n)
	}
}

// TestBusyAndBadNames: with NoWait a held lock answers 409 with
// Retry-After; with Wait it answers after the wait; no name, 400.
func TestBusyAndBadNames(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := client(t, srv)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	noWait := httptest.NewServer(lockhttp.Handler(c, byOrder, ok, lockhttp.NoWait()))
	t.Cleanup(noWait.Close)
	short := httptest.NewServer(lockhttp.Handler(c, byOrder, ok, lockhttp.Wait(100*time.Millisecond), lockhttp.BusyStatus(http.StatusLocked)))
	t.Cleanup(short.Close)
	l, err := c.Mutex("order:7").Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(noWait.URL + "/?order=7")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Retry-After") == "" {
		t.Errorf("NoWait on a held lock: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	start := time.Now()
	if code, _ := get(t, short.URL+"/?order=7"); code != http.StatusLocked || time.Since(start) < 100*time.Millisecond {
		t.Errorf("Wait(100ms) on a held lock: %d after %v", code, time.Since(start))
	}
	// The waiter that gave up leaves the queue in the background; until it
	// has, a release would grant it the lock (no barging), and it would pass
	// the lock on as it leaves.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st, err := c.Inspect(t.Context(), dlock.KindMutex, "order:7")
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Waiters) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter that gave up is still queued: %+v", st.Waiters)
		}
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, noWait.URL+"/?order=7"); code != http.StatusOK {
		t.Errorf("after the unlock: %d", code)
	}
	if code, _ := get(t, noWait.URL+"/"); code != http.StatusBadRequest {
		t.Errorf("no order: %d, want 400", code)
	}
}

// TestLostLock: a handler whose lock is lost sees its context cancelled,
// with the cause.
func TestLostLock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := client(t, srv)
	cause := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			cause <- r.Context().Err()
		case <-time.After(5 * time.Second):
			cause <- nil
		}
	})
	ts := httptest.NewServer(lockhttp.Handler(c, byOrder, h, lockhttp.LockOptions(dlock.WithTTL(200*time.Millisecond), dlock.WithoutRenewal())))
	t.Cleanup(ts.Close)
	get(t, ts.URL+"/?order=9")
	if err := <-cause; err == nil {
		t.Error("the handler's context was not cancelled when its lease ran out")
	}
}

// TestTTL: a request's lock has a TTL of DefaultTTL (10s), whatever the
// Client's default, unless LockOptions sets one.
func TestTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ttl := make(chan time.Duration, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, _ := lockhttp.FromContext(r.Context())
		d, err := l.TTL(r.Context())
		if err != nil {
			t.Error(err)
		}
		ttl <- d
	})
	slow, err := dlock.New(srv.Client(t), dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Close() })
	for _, tc := range []struct {
		what string
		c    *dlock.Client
		opts []lockhttp.Option
		want time.Duration
	}{
		{"a Client with the default TTL", client(t, srv), nil, 10 * time.Second},
		{"a Client with a TTL of 1m", slow, nil, 10 * time.Second},
		{"LockOptions(WithTTL(3s))", slow, []lockhttp.Option{lockhttp.LockOptions(dlock.WithTTL(3 * time.Second))}, 3 * time.Second},
	} {
		ts := httptest.NewServer(lockhttp.Handler(tc.c, byOrder, h, tc.opts...))
		get(t, ts.URL+"/?order=1")
		ts.Close()
		if d := <-ttl; d > tc.want || d < tc.want/2 {
			t.Errorf("%s: the request's lock has %v left, want a TTL of %v", tc.what, d, tc.want)
		}
	}
}

// TestBadInput: a Handler made with bad arguments answers every request with
// 500 and the error, without panicking, running its handler, or writing to
// Redis.
func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := client(t, srv)
	ran := false
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true })
	for _, tc := range []struct {
		what string
		h    func() http.Handler
	}{
		{"a nil Client", func() http.Handler { return lockhttp.Handler(nil, byOrder, ok) }},
		{"a zero Client", func() http.Handler { return lockhttp.Handler(new(dlock.Client), byOrder, ok) }},
		{"a nil name func", func() http.Handler { return lockhttp.Handler(c, nil, ok) }},
		{"a nil handler", func() http.Handler { return lockhttp.Handler(c, byOrder, nil) }},
		{"a nil HandlerFunc", func() http.Handler { return lockhttp.Handler(c, byOrder, http.HandlerFunc(nil)) }},
		{"a nil Option", func() http.Handler { return lockhttp.Handler(c, byOrder, ok, nil) }},
		{"Wait(-1s)", func() http.Handler { return lockhttp.Handler(c, byOrder, ok, lockhttp.Wait(-time.Second)) }},
		{"BusyStatus(0)", func() http.Handler { return lockhttp.Handler(c, byOrder, ok, lockhttp.BusyStatus(0)) }},
		{"BusyStatus(200)", func() http.Handler { return lockhttp.Handler(c, byOrder, ok, lockhttp.BusyStatus(http.StatusOK)) }},
	} {
		w := httptest.NewRecorder()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("Handler with %s panicked: %v", tc.what, p)
				}
			}()
			tc.h().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/?order=1", nil))
		}()
		if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "lockhttp") {
			t.Errorf("Handler with %s answers %d %q; want 500 with the error", tc.what, w.Code, w.Body.String())
		}
	}
	if ran {
		t.Error("a Handler made with bad input ran its handler")
	}
	if n := srv.Client(t).DBSize(t.Context()).Val(); n != 0 {
		t.Errorf("bad input wrote %d keys: %v", n, srv.Client(t).Keys(t.Context(), "*").Val())
	}
}
