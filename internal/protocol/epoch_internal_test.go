package protocol

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/rclient/goredis"
	"github.com/dlock-go/dlock/internal/redistest"
)

// TestKeptData: a node vouches for its server's data from its first reading
// of the epoch on, until the server loses data wholesale (FLUSHALL, a
// restart) or will not tell (its statistics reset); a hold begun before
// the first reading, or before the latest change, gets no vouching.
func TestKeptData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	c, err := goredis.New(rdb, false)
	if err != nil {
		t.Fatal(err)
	}
	n := NewNode(c, nil)
	early := time.Now()
	if KeptData(ctx, n, early) {
		t.Fatal("kept data with no epoch read")
	}
	WatchData(ctx, n)
	if KeptData(ctx, n, early) {
		t.Error("kept data since before the first reading")
	}
	since := time.Now()
	rdb.Set(ctx, "some", "key", 0)
	rdb.Del(ctx, "some")
	if !KeptData(ctx, n, since) {
		t.Error("not kept across writes and a DEL")
	}
	WatchData(ctx, n) // the same epoch: the first reading stays
	if !KeptData(ctx, n, since) {
		t.Error("not kept after a second reading of the same epoch")
	}
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"FLUSHALL", func() error { return rdb.FlushAll(ctx).Err() }},
		{"FLUSHDB", func() error { return rdb.FlushDB(ctx).Err() }},
		{"CONFIG RESETSTAT", func() error {
			// (Nothing lost, but the counts start again: it cannot be told.)
			rdb.FlushAll(ctx)
			WatchData(ctx, n)
			since = time.Now()
			return rdb.ConfigResetStat(ctx).Err()
		}},
		{"restart", srv.Restart},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if KeptData(ctx, n, since) {
			t.Errorf("kept data across %s", step.name)
		}
		// The new epoch vouches for holds begun after it was read.
		since = time.Now()
		if !KeptData(ctx, n, since) {
			t.Errorf("not kept since the epoch after %s was read", step.name)
		}
	}
}

// TestEpochOf: the epoch is made of the fields that change when a server
// loses data wholesale, with the call counts alone of their statistics.
func TestEpochOf(t *testing.T) {
	info := "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:9\r\n" +
		"# Replication\r\nrole:master\r\nmaster_replid:r1\r\nmaster_repl_offset:5\r\n" +
		"# Stats\r\nevicted_keys:0\r\nexpired_keys:7\r\n" +
		"# Commandstats\r\ncmdstat_flushall:calls=2,usec=30,usec_per_call=15.00,rejected_calls=0,failed_calls=0\r\ncmdstat_get:calls=9,usec=1\r\n"
	got, ok := epochOf(info)
	want := "run_id:abc;role:master;master_replid:r1;evicted_keys:0;cmdstat_flushall:calls=2;"
	if !ok || got != want {
		t.Errorf("epochOf = %q, %v; want %q", got, ok, want)
	}
	if _, ok := epochOf("# Server\r\nredis_version:7.0.15\r\n"); ok {
		t.Error("an epoch with no run_id")
	}
}
