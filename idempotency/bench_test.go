package idempotency_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/idempotency"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/lockhttp"
)

// BenchmarkDo: Do of a new key each time (a first run) and of a key whose
// response is stored (a replay), one caller, with the round trips each makes
// to Redis (rt/op).
func BenchmarkDo(b *testing.B) {
	ctx := context.Background()
	srv := redistest.Start(b)
	var rt roundTrips
	rdb := srv.Client(b)
	rdb.AddHook(&rt)
	c, err := dlock.New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	s, err := idempotency.New(c, rdb)
	if err != nil {
		b.Fatal(err)
	}
	fn := func(context.Context) ([]byte, bool, error) { return []byte("order 1"), true, nil }
	if _, err := s.Do(ctx, "stored", "fp", fn); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		key  func(i int) string
	}{
		{"first", func(i int) string { return "first-" + strconv.Itoa(i) }},
		{"replay", func(int) string { return "stored" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			rt.n.Store(0)
			i := 0
			for b.Loop() {
				i++
				if _, err := s.Do(ctx, bc.key(i), "fp", fn); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rt.n.Load())/float64(i), "rt/op")
		})
	}
}

// BenchmarkMiddleware: a request with a new key through Middleware around
// lockhttp.Handler, served in-process, with the round trips it makes to
// Redis (rt/op).
func BenchmarkMiddleware(b *testing.B) {
	srv := redistest.Start(b)
	var rt roundTrips
	rdb := srv.Client(b)
	rdb.AddHook(&rt)
	c, err := dlock.New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	s, err := idempotency.New(c, rdb)
	if err != nil {
		b.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	h := s.Middleware(lockhttp.Handler(c, byPath, ok))
	serve := func(key string) {
		req := httptest.NewRequest(http.MethodPost, "/order", strings.NewReader("a"))
		req.Header.Set(idempotency.Header, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	serve("warm-up") // the Client's first use loads its scripts
	rt.n.Store(0)
	i := 0
	for b.Loop() {
		i++
		serve("k-" + strconv.Itoa(i))
	}
	b.ReportMetric(float64(rt.n.Load())/float64(i), "rt/op")
}
