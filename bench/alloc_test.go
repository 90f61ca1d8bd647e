package main

import (
	"context"
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
