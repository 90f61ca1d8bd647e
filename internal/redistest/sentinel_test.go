package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestSentinelForms proves that a set-up of a primary, 2 replicas and 3
// sentinels is ready when StartSentinel returns: a failover client writes
// and reads, both replicas acknowledge a write and have it, and every
// sentinel names the primary, lists both replicas and the 2 other sentinels.
func TestSentinelForms(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := redistest.StartSentinel(t, 2, 3)
	t.Logf("formed in %v", time.Since(start))
	ctx := context.Background()

	servers := s.Servers()
	if len(servers) != 3 || len(s.Sentinels()) != 3 || len(s.SentinelAddrs()) != 3 {
		t.Fatalf("%d data servers, %d sentinels, %d sentinel addresses; want 3 of each", len(servers), len(s.Sentinels()), len(s.SentinelAddrs()))
	}
	p, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p != servers[0] {
		t.Fatalf("Primary = %s, want the first server %s", p.Addr, servers[0].Addr)
	}
	replicas, err := s.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !sameServers(replicas, servers[1:]) {
		t.Fatalf("Replicas = %v, want %v", addrsOf(replicas), addrsOf(servers[1:]))
	}

	rdb := s.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET through the failover client = %q, %v; want v", got, err)
	}
	if got := setAndWait(t, p, "k2", 2, 5*time.Second); got != 2 {
		t.Fatalf("WAIT 2 on the primary after a SET = %d, want 2", got)
	}
	for _, r := range replicas {
		role, port, link := replication(t, r)
		if role != "slave" || port != p.Port || link != "up" {
			t.Fatalf("replica %s: role %s of %d, link %s; want slave of %d, up", r.Addr, role, port, link, p.Port)
		}
		for _, k := range []string{"k", "k2"} {
			if err := r.Client(t).Get(ctx, k).Err(); err != nil {
				t.Fatalf("GET %s on replica %s: %v", k, r.Addr, err)
			}
		}
	}
	for _, sn := range s.Sentinels() {
		addr, replicas, peers := sentinelView(t, sn)
		if addr != p.Addr || replicas != 2 || peers != 2 {
			t.Fatalf("sentinel %s names %s, knows %d replicas and %d other sentinels; want %s, 2, 2", sn.Addr, addr, replicas, peers, p.Addr)
		}
	}
}

// TestSentinelFailover proves that Failover promotes a replica without
// losing a write made before it, that the old primary becomes a replica of
// the new one, and that an existing failover client writes to the new
// primary straight after.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 2, 3)
	ctx := context.Background()
	rdb := s.Client(t)
	if err := rdb.Set(ctx, "before", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	promoted, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Failover took %v", time.Since(start))
	if promoted == old {
		t.Fatalf("Failover returned the old primary %s", old.Addr)
	}
	if now, err := s.Primary(ctx); err != nil || now != promoted {
		t.Fatalf("Primary after Failover = %v, %v; want %s", addrOf(now), err, promoted.Addr)
	}
	role, port, link := replication(t, old)
	if role != "slave" || port != promoted.Port || link != "up" {
		t.Fatalf("old primary: role %s of %d, link %s; want slave of %d, up", role, port, link, promoted.Port)
	}
	if replicas, err := s.Replicas(ctx); err != nil || len(replicas) != 2 || !slices.Contains(replicas, old) {
		t.Fatalf("Replicas after Failover = %v, %v; want 2 with the old primary %s", addrsOf(replicas), err, old.Addr)
	}
	if got, err := promoted.Client(t).Get(ctx, "before").Result(); err != nil || got != "kept" {
		t.Fatalf("GET before on the new primary = %q, %v; want kept", got, err)
	}
	t.Logf("the existing client wrote to the new primary %v after Failover returned", writesReach(t, rdb, promoted))
}

// TestSentinelKillPrimaryRejoin proves that KillPrimary promotes the
// replica, that Rejoin brings the killed primary back as a new, empty
// process that then syncs every key as a replica of the new primary, and
// that the set-up can then fail over again, back to it.
func TestSentinelKillPrimaryRejoin(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 1, 3)
	ctx := context.Background()
	rdb := s.Client(t)
	if err := rdb.Set(ctx, "before", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	pid := s.Servers()[0].PID()

	start := time.Now()
	old, promoted, err := s.KillPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("KillPrimary took %v", time.Since(start))
	if old != s.Servers()[0] || promoted != s.Servers()[1] || old.PID() != 0 {
		t.Fatalf("KillPrimary = %s (PID %d), %s; want the killed %s, %s", old.Addr, old.PID(), promoted.Addr, s.Servers()[0].Addr, s.Servers()[1].Addr)
	}
	if now, err := s.Primary(ctx); err != nil || now != promoted {
		t.Fatalf("Primary after KillPrimary = %v, %v; want %s", addrOf(now), err, promoted.Addr)
	}
	t.Logf("the existing client wrote to the new primary %v after KillPrimary returned", writesReach(t, rdb, promoted))
	if err := rdb.Set(ctx, "after", "synced", 0).Err(); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	if err := s.Rejoin(ctx, old); err != nil {
		t.Fatal(err)
	}
	t.Logf("Rejoin took %v", time.Since(start))
	if old.PID() == 0 || old.PID() == pid {
		t.Fatalf("rejoined server has PID %d, want a new process (was %d)", old.PID(), pid)
	}
	role, port, link := replication(t, old)
	if role != "slave" || port != promoted.Port || link != "up" {
		t.Fatalf("rejoined server: role %s of %d, link %s; want slave of %d, up", role, port, link, promoted.Port)
	}
	direct := old.Client(t)
	for k, v := range map[string]string{"before": "kept", "after": "synced"} {
		if got, err := direct.Get(ctx, k).Result(); err != nil || got != v {
			t.Fatalf("GET %s on the rejoined replica = %q, %v; want %s", k, got, err, v)
		}
	}

	back, again, err := s.KillPrimary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if back != promoted || again != old {
		t.Fatalf("second KillPrimary = %s, %s; want %s, the rejoined %s", back.Addr, again.Addr, promoted.Addr, old.Addr)
	}
	writesReach(t, rdb, old)
	if got, err := rdb.Get(ctx, "after").Result(); err != nil || got != "synced" {
		t.Fatalf("GET after on the rejoined server, now primary = %q, %v; want synced", got, err)
	}
}

// TestSentinelLag proves that lagged replicas miss writes: WAIT on the
// primary counts none of them, and only the others when some are lagged;
// that the sentinels see a replica lagged past down-after as down; and that
// after resume every replica has the missed writes, is acknowledged by WAIT
// and is healthy again to the sentinels.
func TestSentinelLag(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 2, 1)
	ctx := context.Background()
	p, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replicas, err := s.Replicas(ctx)
	if err != nil {
		t.Fatal(err)
	}

	resume, err := s.Lag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// WAIT counts replicas that have the connection's writes: the write
	// made while lagged, on conn, until it is WAITed for after resume.
	conn := p.Client(t).Conn()
	defer conn.Close()
	if err := conn.Set(ctx, "missed", "v", 0).Err(); err != nil {
		_ = resume()
		t.Fatal(err)
	}
	if got, err := conn.Do(ctx, "WAIT", 1, 100).Int(); err != nil || got != 0 {
		_ = resume()
		t.Fatalf("WAIT 1 100 with every replica lagged = %d, %v; want 0", got, err)
	}
	// Past down-after, the sentinels mark the lagged replicas down.
	sn := s.Sentinels()[0]
	deadline := time.Now().Add(5 * time.Second)
	for down := 0; down < len(replicas); {
		down = 0
		for _, r := range sentinelReplicas(t, sn) {
			if strings.Contains(r["flags"], "s_down") {
				down++
			}
		}
		if time.Now().After(deadline) {
			_ = resume()
			t.Fatalf("after 5 s, sentinel %s sees %d of %d lagged replicas down", sn.Addr, down, len(replicas))
		}
		time.Sleep(50 * time.Millisecond)
	}
	start := time.Now()
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	t.Logf("resume took %v", time.Since(start))
	if got, err := conn.Do(ctx, "WAIT", 2, 5000).Int(); err != nil || got != 2 {
		t.Fatalf("WAIT 2 5000 after resume = %d, %v; want 2", got, err)
	}
	for _, r := range replicas {
		if err := r.Client(t).Get(ctx, "missed").Err(); err != nil {
			t.Fatalf("GET missed on resumed replica %s: %v", r.Addr, err)
		}
	}
	for _, r := range sentinelReplicas(t, sn) {
		if strings.Contains(r["flags"], "down") {
			t.Fatalf("after resume, sentinel %s sees replica %s:%s as %s", sn.Addr, r["ip"], r["port"], r["flags"])
		}
	}

	resume, err = s.Lag(ctx, replicas[0])
	if err != nil {
		t.Fatal(err)
	}
	got := setAndWait(t, p, "one", 2, 200*time.Millisecond)
	if err := resume(); err != nil {
		t.Fatal(err)
	}
	if got != 1 {
		t.Fatalf("WAIT 2 200 with one of 2 replicas lagged = %d, want 1", got)
	}
	if got := setAndWait(t, p, "one", 2, 5*time.Second); got != 2 {
		t.Fatalf("WAIT 2 after resuming the one = %d, want 2", got)
	}
}

// TestSentinelLossyFailover proves that LossyFailover loses exactly the
// write made during it: a marker key the old primary had is absent on the
// promoted primary and its replica, a key written before is there, and the
// old primary rejoins without it.
func TestSentinelLossyFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 2, 3)
	ctx := context.Background()
	rdb := s.Client(t)
	if err := rdb.Set(ctx, "before", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	old, promoted, err := s.LossyFailover(ctx, func() error {
		if err := rdb.Set(ctx, "marker", "lost", 0).Err(); err != nil {
			return err
		}
		// The old primary has the write: only the failover can lose it.
		got, err := rdb.Get(ctx, "marker").Result()
		if err == nil && got != "lost" {
			err = fmt.Errorf("GET marker = %q on the old primary", got)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("LossyFailover took %v", time.Since(start))
	if promoted == old || old.PID() != 0 {
		t.Fatalf("LossyFailover returned %s with the old primary %s at PID %d", promoted.Addr, old.Addr, old.PID())
	}
	if now, err := s.Primary(ctx); err != nil || now != promoted {
		t.Fatalf("Primary after LossyFailover = %v, %v; want %s", addrOf(now), err, promoted.Addr)
	}
	writesReach(t, rdb, promoted)
	if err := rdb.Get(ctx, "marker").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET marker through the failover client after LossyFailover: %v, want redis.Nil: the write was not lost", err)
	}
	replicas, err := s.Replicas(ctx)
	if err != nil || len(replicas) != 1 {
		t.Fatalf("Replicas after LossyFailover = %v, %v; want 1", addrsOf(replicas), err)
	}
	for _, d := range []*redistest.Server{promoted, replicas[0]} {
		if err := d.Client(t).Get(ctx, "marker").Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("GET marker on %s: %v, want redis.Nil", d.Addr, err)
		}
		if got, err := d.Client(t).Get(ctx, "before").Result(); err != nil || got != "kept" {
			t.Fatalf("GET before on %s = %q, %v; want kept", d.Addr, got, err)
		}
	}

	if err := s.Rejoin(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := old.Client(t).Get(ctx, "marker").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET marker on the rejoined old primary: %v, want redis.Nil", err)
	}
}

// TestSentinelLossyFailoverTo proves, in 3 rounds, that LossyFailoverTo
// promotes the replica it is given without a marker key that the other
// replica acknowledged (WAIT 1 on the primary returns 1), that it kills the
// primary and that other replica, and that after both are rejoined, in
// either order, the set-up fails over again: by LossyFailoverTo in the next
// round, and by Failover at the end, after which a failover client writes.
func TestSentinelLossyFailoverTo(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 2, 3)
	ctx := context.Background()
	rdb := s.Client(t)
	if err := rdb.Set(ctx, "before", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		old, err := s.Primary(ctx)
		if err != nil {
			t.Fatal(err)
		}
		replicas, err := s.Replicas(ctx)
		if err != nil || len(replicas) != 2 {
			t.Fatalf("round %d: Replicas = %v, %v; want 2", round, addrsOf(replicas), err)
		}
		to, other := replicas[round%2], replicas[1-round%2]
		marker := fmt.Sprint("marker", round)

		start := time.Now()
		killed, err := s.LossyFailoverTo(ctx, to, func() error {
			direct := redis.NewClient(old.Options())
			defer direct.Close()
			conn := direct.Conn()
			defer conn.Close()
			if err := conn.Set(ctx, marker, "lost", 0).Err(); err != nil {
				return err
			}
			// Only the other replica can acknowledge: to is lagged.
			if n, err := conn.Do(ctx, "WAIT", 1, 200).Int(); err != nil || n != 1 {
				return fmt.Errorf("WAIT 1 200 on %s = %d, %v; want 1, from %s", old.Addr, n, err, other.Addr)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		took := time.Since(start)
		if len(killed) != 2 || killed[0] != old || killed[1] != other || old.PID() != 0 || other.PID() != 0 || to.PID() == 0 {
			t.Fatalf("round %d: LossyFailoverTo(%s) killed %v; want %s, then %s, and to running", round, to.Addr, addrsOf(killed), old.Addr, other.Addr)
		}
		if now, err := s.Primary(ctx); err != nil || now != to {
			t.Fatalf("round %d: Primary after LossyFailoverTo = %v, %v; want %s", round, addrOf(now), err, to.Addr)
		}
		direct := to.Client(t)
		if err := direct.Get(ctx, marker).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("round %d: GET %s on the promoted %s: %v, want redis.Nil: the acknowledged write was not lost", round, marker, to.Addr, err)
		}
		if got, err := direct.Get(ctx, "before").Result(); err != nil || got != "kept" {
			t.Fatalf("round %d: GET before on the promoted %s = %q, %v; want kept", round, to.Addr, got, err)
		}

		start = time.Now()
		if round%2 == 1 {
			slices.Reverse(killed)
		}
		for _, d := range killed {
			if err := s.Rejoin(ctx, d); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		t.Logf("round %d: LossyFailoverTo took %v, Rejoin of %d servers %v", round, took, len(killed), time.Since(start))
		if replicas, err := s.Replicas(ctx); err != nil || !sameServers(replicas, []*redistest.Server{old, other}) {
			t.Fatalf("round %d: Replicas after Rejoin = %v, %v; want %s and %s", round, addrsOf(replicas), err, old.Addr, other.Addr)
		}
		for _, d := range killed {
			if err := d.Client(t).Get(ctx, marker).Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("round %d: GET %s on the rejoined %s: %v, want redis.Nil", round, marker, d.Addr, err)
			}
		}
	}

	promoted, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writesReach(t, rdb, promoted)
	if err := rdb.Set(ctx, "after", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the failover client after 3 rounds and a Failover: %v", err)
	}
	if got, err := rdb.Get(ctx, "before").Result(); err != nil || got != "kept" {
		t.Fatalf("GET before through the failover client = %q, %v; want kept", got, err)
	}
}

// TestSentinelRestartPrimaryEmpty proves that RestartPrimaryEmpty leaves the
// same server primary, as a new process with no keys, that its replica
// resyncs to empty, and that the failover client goes on writing to it.
func TestSentinelRestartPrimaryEmpty(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 1, 3)
	ctx := context.Background()
	rdb := s.Client(t)
	p, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := setAndWait(t, p, "gone", 1, 5*time.Second); got != 1 {
		t.Fatalf("WAIT 1 = %d, want 1", got)
	}
	pid := p.PID()

	start := time.Now()
	got, err := s.RestartPrimaryEmpty(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RestartPrimaryEmpty took %v", time.Since(start))
	if got != p || p.PID() == 0 || p.PID() == pid {
		t.Fatalf("RestartPrimaryEmpty = %s at PID %d; want %s as a new process (was %d)", got.Addr, p.PID(), p.Addr, pid)
	}
	if now, err := s.Primary(ctx); err != nil || now != p {
		t.Fatalf("Primary after RestartPrimaryEmpty = %v, %v; want the same %s", addrOf(now), err, p.Addr)
	}
	for _, d := range s.Servers() {
		if n, err := d.Client(t).DBSize(ctx).Result(); err != nil || n != 0 {
			t.Fatalf("DBSIZE on %s after RestartPrimaryEmpty = %d, %v; want 0", d.Addr, n, err)
		}
	}
	if err := rdb.Get(ctx, "gone").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET gone through the failover client: %v, want redis.Nil", err)
	}
	writesReach(t, rdb, p)
}

// TestSentinelRequirepass proves that a set-up whose data servers require a
// password forms, that a failover client from FailoverOptions
// authenticates, that a client without the password is refused, and that
// the sentinels, told the password, can fail over.
func TestSentinelRequirepass(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t, 1, 3, "--requirepass", "secret")
	ctx := context.Background()
	if pw := s.FailoverOptions().Password; pw != "secret" {
		t.Fatalf("FailoverOptions().Password = %q, want secret", pw)
	}
	rdb := s.Client(t)
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET with the password: %v", err)
	}
	old, err := s.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	anon := redis.NewClient(&redis.Options{Addr: old.Addr, MaxRetries: -1})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("PING without the password: %v, want a NOAUTH error", err)
	}

	promoted, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	role, port, link := replication(t, old)
	if role != "slave" || port != promoted.Port || link != "up" {
		t.Fatalf("old primary: role %s of %d, link %s; want slave of %d, up", role, port, link, promoted.Port)
	}
	writesReach(t, rdb, promoted)
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k after Failover = %q, %v; want v", got, err)
	}
}

// setAndWait sets key on server p and then, on the same connection, runs
// WAIT n for timeout, and returns WAIT's count.
func setAndWait(t *testing.T, p *redistest.Server, key string, n int, timeout time.Duration) int64 {
	t.Helper()
	ctx := context.Background()
	conn := p.Client(t).Conn()
	defer conn.Close()
	if err := conn.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET %s on %s: %v", key, p.Addr, err)
	}
	got, err := conn.Do(ctx, "WAIT", n, timeout.Milliseconds()).Int64()
	if err != nil {
		t.Fatalf("WAIT %d %d on %s: %v", n, timeout.Milliseconds(), p.Addr, err)
	}
	return got
}

// writesReach waits until a write through rdb lands on want, for at most
// 5 s, and returns how long that took.
func writesReach(t *testing.T, rdb *redis.Client, want *redistest.Server) time.Duration {
	t.Helper()
	ctx := context.Background()
	direct := want.Client(t)
	start := time.Now()
	for i := 0; ; i++ {
		v := fmt.Sprint("w", i)
		err := rdb.Set(ctx, "probe", v, 0).Err()
		if err == nil {
			var got string
			if got, err = direct.Get(ctx, "probe").Result(); err == nil && got != v {
				err = fmt.Errorf("%s has %q", want.Addr, got)
			}
		}
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("writes through the failover client do not reach %s after 5 s: %v", want.Addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sentinelView returns the primary address sentinel sn names, and the number
// of replicas and other sentinels it knows.
func sentinelView(t *testing.T, sn *redistest.Server) (addr string, replicas, peers int) {
	t.Helper()
	ctx := context.Background()
	rdb := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
	defer rdb.Close()
	hp, err := rdb.GetMasterAddrByName(ctx, redistest.SentinelMaster).Result()
	if err != nil || len(hp) != 2 {
		t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME on %s = %v, %v", sn.Addr, hp, err)
	}
	others, err := rdb.Sentinels(ctx, redistest.SentinelMaster).Result()
	if err != nil {
		t.Fatal(err)
	}
	return hp[0] + ":" + hp[1], len(sentinelReplicas(t, sn)), len(others)
}

// sentinelReplicas returns sentinel sn's SENTINEL REPLICAS reply.
func sentinelReplicas(t *testing.T, sn *redistest.Server) []map[string]string {
	t.Helper()
	rdb := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr})
	defer rdb.Close()
	replicas, err := rdb.Replicas(context.Background(), redistest.SentinelMaster).Result()
	if err != nil {
		t.Fatalf("SENTINEL REPLICAS on %s: %v", sn.Addr, err)
	}
	return replicas
}

// sameServers reports whether a and b hold the same servers in any order.
func sameServers(a, b []*redistest.Server) bool {
	if len(a) != len(b) {
		return false
	}
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}

// addrsOf returns the addresses of ss.
func addrsOf(ss []*redistest.Server) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Addr)
	}
	return out
}
