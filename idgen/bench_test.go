package idgen_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/dlock-go/dlock/idgen"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkIDs hands out ids from one process, side by side in one run on
// one private redis-server: this package's Generator with blocks of 100 and
// of 1, and the one-INCR-per-id design of the flash-sale tutorials'
// RedisIdWorker (a counter per day, the id the local clock's seconds << 32
// plus the count). Each reports ids/s; the ratio is what reserving blocks
// buys.
//
//	go test -run '^$' -bench IDs -count 5 ./idgen
func BenchmarkIDs(b *testing.B) {
	srv := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	for _, block := range []int64{100, 1} {
		b.Run("idgen-block-"+strconv.FormatInt(block, 10), func(b *testing.B) {
			g, err := idgen.New(rdb, "bench", idgen.WithBlock(block))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := g.Next(ctx); err != nil { // the first waits for the next second
				b.Fatal(err)
			}
			start := time.Now()
			for b.Loop() {
				if _, err := g.Next(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ids/s")
		})
	}
	b.Run("incr-per-id", func(b *testing.B) {
		epoch := idgen.Epoch.Unix()
		start := time.Now()
		for b.Loop() {
			now := time.Now()
			n, err := rdb.Incr(ctx, "icr:order:"+now.Format("2006:01:02")).Result()
			if err != nil {
				b.Fatal(err)
			}
			_ = (now.Unix()-epoch)<<32 | n
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ids/s")
	})
}
