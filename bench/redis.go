package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// stats is a snapshot of the server's counters: commands executed (INFO
// commandstats, INFO itself left out) and CPU used (INFO cpu).
type stats struct {
	calls      int64
	perCmd     map[string]int64
	cpu        float64 // seconds, sys+user
	scriptUsec int64   // time spent running EVAL and EVALSHA, in µs (commandstats)
	// usec is each command's time in µs (commandstats); a script's includes
	// that of the commands it calls, which are counted apart too.
	usec map[string]int64
}

func (a stats) sub(b stats) stats {
	d := stats{calls: a.calls - b.calls, cpu: a.cpu - b.cpu, scriptUsec: a.scriptUsec - b.scriptUsec, perCmd: map[string]int64{}, usec: map[string]int64{}}
	for k, v := range a.perCmd {
		if v-b.perCmd[k] != 0 {
			d.perCmd[k] = v - b.perCmd[k]
		}
	}
	for k, v := range a.usec {
		if v-b.usec[k] != 0 {
			d.usec[k] = v - b.usec[k]
		}
	}
	return d
}

// snapshot reads INFO cpu and commandstats in one request.
func snapshot(ctx context.Context, rdb *redis.Client) (stats, error) {
	txt, err := rdb.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return stats{}, err
	}
	st := stats{perCmd: map[string]int64{}, usec: map[string]int64{}}
	sc := bufio.NewScanner(strings.NewReader(txt))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "used_cpu_sys:"), strings.HasPrefix(line, "used_cpu_user:"):
			v, _ := strconv.ParseFloat(line[strings.IndexByte(line, ':')+1:], 64)
			st.cpu += v
		case strings.HasPrefix(line, "cmdstat_"):
			name, rest, _ := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
			if name == "info" {
				continue
			}
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					st.calls += n
					st.perCmd[name] = n
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					st.usec[name] = n
					if name == "evalsha" || name == "eval" {
						st.scriptUsec += n
					}
				}
			}
		}
	}
	return st, nil
}

// serverVersion returns redis_version from INFO server.
func serverVersion(ctx context.Context, rdb *redis.Client) string {
	txt, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	version := "unknown"
	for _, line := range strings.Split(txt, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			return "valkey " + v // Valkey reports a redis_version of its own too
		}
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			version = v
		}
	}
	return version
}

func mustSnapshot(rdb *redis.Client) stats {
	st, err := snapshot(context.Background(), rdb)
	if err != nil {
		fmt.Fprintln(os.Stderr, "INFO failed:", err)
		os.Exit(1)
	}
	return st
}

// serverSnapshot is mustSnapshot, except that the CPU is that of v's own
// server when v has one (v.serverCPU).
func serverSnapshot(rdb *redis.Client, v *variant) stats {
	st := mustSnapshot(rdb)
	if v != nil && v.serverCPU != nil {
		st.cpu = v.serverCPU()
	}
	return st
}

// settle waits, for at most 15 s, until at most 1,000 keys with an expiry
// are left on the server: the keys a section leaves to expire (the peers'
// locks, dlock's fences) then expire before the next section starts
// instead of during it, where Redis's expiry cycle would stall whichever
// library runs then.
func settle(rdb *redis.Client) {
	ctx := context.Background()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		txt, err := rdb.Info(ctx, "keyspace").Result()
		if err != nil {
			return
		}
		if expiring(txt) <= 1000 {
			return
		}
	}
}

// expiring returns the keys with an expiry that INFO keyspace's reply txt
// counts over every database.
func expiring(txt string) int64 {
	var n int64
	for _, line := range strings.Split(txt, "\n") {
		_, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(line, "db") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "expires="); ok {
				e, _ := strconv.ParseInt(v, 10, 64)
				n += e
			}
		}
	}
	return n
}
