package lockhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/lockhttp"
	"github.com/redis/go-redis/v9"
)

// roundTrips is a go-redis hook that counts the round trips a client makes
// to Redis: each command sent alone and each pipeline is one.
type roundTrips struct{ n atomic.Int64 }

func (rt *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (rt *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		rt.n.Add(1)
		return next(ctx, cmd)
	}
}

func (rt *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rt.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkHandler: one request at a time under one lock, served
// in-process, with the round trips each makes to Redis (rt/op).
func BenchmarkHandler(b *testing.B) {
	srv := redistest.Start(b)
	var rt roundTrips
	rdb := srv.Client(b)
	c, err := dlock.New(rdb)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	h := lockhttp.Handler(c, byOrder, ok)
	serve := func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/?order=1", nil))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	serve() // the Client's first use loads its scripts
	rdb.AddHook(&rt)
	i := 0
	for b.Loop() {
		i++
		serve()
	}
	b.ReportMetric(float64(rt.n.Load())/float64(i), "rt/op")
}
