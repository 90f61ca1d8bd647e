package main

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

// BenchmarkAcquireRelease takes and releases one free lock back to back with
// each library's default and aggressive settings, on one private
// redis-server: run with -benchmem for the client's allocations and bytes per
// acquire+release, side by side. The request counters are left off, so that
// their hooks allocate nothing.
//
//	cd bench && go test -run '^$' -bench AcquireRelease -benchmem -count 5
func BenchmarkAcquireRelease(b *testing.B) {
	srv, err := redistest.Launch(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	for _, v := range allVariants() {
		if v.retryOnly {
			continue
		}
		b.Run(v.label(), func(b *testing.B) {
			lk, err := v.open(srv.Addr, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer lk.close()
			cycle := func() {
				release, err := lk.lock(ctx, "bench-alloc")
				if err != nil {
					b.Fatal(err)
				}
				if err := release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			for range 10 { // connections dialled, scripts loaded
				cycle()
			}
			b.ReportAllocs()
			for b.Loop() {
				cycle()
			}
		})
	}
}

// BenchmarkParallel64 is the parallel scenario as a Go benchmark: 64
// goroutines, each on a key of its own, take and release through one
// instance of each library, on one private redis-server
// (DLOCK_REDIS_SERVER names another binary). With -cpuprofile it shows
// where a library's client spends its CPU, which the server shares on a
// small machine.
//
//	cd bench && go test -run '^$' -bench 'Parallel64/(dlock|rueidislock)' -count 5
func BenchmarkParallel64(b *testing.B) {
	srv, err := redistest.Launch(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Close() })
	ctx := context.Background()
	for _, v := range allVariants() {
		if v.retryOnly {
			continue
		}
		b.Run(v.label(), func(b *testing.B) {
			lk, err := v.open(srv.Addr, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer lk.close()
			var next atomic.Int64
			b.SetParallelism(32) // 64 goroutines on 2 CPUs
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				key := "bench-par-" + strconv.FormatInt(next.Add(1), 10)
				for pb.Next() {
					release, err := lk.lock(ctx, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
