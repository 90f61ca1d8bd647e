package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestClusterForms proves that a 3×1 cluster is ready when StartCluster
// returns: a cluster client writes and reads keys in every primary's slots,
// CLUSTER SLOTS lists three shards with a replica each, and every node's bus
// port is its port plus 10000, below the ephemeral range. Then Flush empties
// every node, replicas included.
func TestClusterForms(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := c.Client(t)

	if n := len(c.Addrs()); n != 6 {
		t.Fatalf("Addrs has %d nodes, want 6", n)
	}
	primaries, err := c.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(primaries) != 3 {
		t.Fatalf("Primaries returned %d nodes, want 3", len(primaries))
	}
	for i, p := range primaries {
		if p.PID() == 0 {
			t.Fatalf("primary %s has no PID", p.Addr)
		}
		key := keyServedBy(t, c, p)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s through the cluster client: %v", key, err)
		}
		if got, err := rdb.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s through the cluster client = %d, %v; want %d", key, got, err, i)
		}
		if got, err := p.Client(t).Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s on %s itself = %d, %v; want %d", key, p.Addr, got, err, i)
		}
	}

	checkShards(t, c, primaries)

	for _, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		nodes, err := node.ClusterNodes(ctx).Result()
		_ = node.Close()
		if err != nil {
			t.Fatal(err)
		}
		port, bus := myPorts(t, nodes)
		if net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) != addr {
			t.Fatalf("node %s says it is on port %d", addr, port)
		}
		if bus != port+10000 || bus >= 32768 {
			t.Fatalf("node %s has bus port %d, want %d below 32768", addr, bus, port+10000)
		}
	}

	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for _, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		n, err := node.DBSize(ctx).Result()
		_ = node.Close()
		if err != nil || n != 0 {
			t.Fatalf("DBSIZE on %s after Flush = %d, %v; want 0", addr, n, err)
		}
	}
}

// TestClusterFailover proves that Failover swaps a primary and its replica
// without losing a write and that a cluster client, once reloaded, writes to
// the new primary.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := c.Client(t)

	const key = "failover"
	if err := rdb.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := c.PrimaryFor(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := c.Failover(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if promoted == old {
		t.Fatalf("Failover returned the old primary %s", old.Addr)
	}
	if now, err := c.PrimaryFor(ctx, key); err != nil || now != promoted {
		t.Fatalf("PrimaryFor after Failover = %v, %v; want %s", addrOf(now), err, promoted.Addr)
	}
	if r, err := c.ReplicaOf(ctx, promoted); err != nil || r != old {
		t.Fatalf("ReplicaOf the new primary = %v, %v; want the old primary %s", addrOf(r), err, old.Addr)
	}
	role, masterPort, link := replication(t, old)
	if role != "slave" || masterPort != promoted.Port || link != "up" {
		t.Fatalf("old primary: role %s, master port %d, link %s; want slave of %d, up", role, masterPort, link, promoted.Port)
	}

	waitRouted(t, rdb, key, promoted)
	if got, err := rdb.Get(ctx, key).Result(); err != nil || got != "before" {
		t.Fatalf("GET %s after Failover = %q, %v; want before", key, got, err)
	}
	if err := rdb.Set(ctx, key, "after", 0).Err(); err != nil {
		t.Fatalf("SET after Failover: %v", err)
	}
	if got, err := promoted.Client(t).Get(ctx, key).Result(); err != nil || got != "after" {
		t.Fatalf("GET %s on the new primary = %q, %v; want after", key, got, err)
	}
}

// TestClusterKillPrimaryRejoin proves that KillPrimary promotes the replica,
// that Rejoin brings the killed node back as an in-sync replica of it in a
// full cluster of six, and that the cluster can then fail over again.
func TestClusterKillPrimaryRejoin(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := c.Client(t)

	const key = "rejoin"
	old, err := c.PrimaryFor(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	pid := old.PID()
	promoted, err := c.KillPrimary(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if old.PID() != 0 {
		t.Fatalf("killed primary %s still has a PID", old.Addr)
	}
	if now, err := c.PrimaryFor(ctx, key); err != nil || now != promoted {
		t.Fatalf("PrimaryFor after KillPrimary = %v, %v; want %s", addrOf(now), err, promoted.Addr)
	}
	if n := len(c.Addrs()); n != 5 {
		t.Fatalf("Addrs has %d nodes after KillPrimary, want 5", n)
	}
	waitRouted(t, rdb, key, promoted)
	if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatalf("SET after KillPrimary: %v", err)
	}

	if err := c.Rejoin(ctx, old); err != nil {
		t.Fatal(err)
	}
	if old.PID() == 0 || old.PID() == pid {
		t.Fatalf("rejoined node has PID %d, want a new process (was %d)", old.PID(), pid)
	}
	role, masterPort, link := replication(t, old)
	if role != "slave" || masterPort != promoted.Port || link != "up" {
		t.Fatalf("rejoined node: role %s, master port %d, link %s; want slave of %d, up", role, masterPort, link, promoted.Port)
	}
	conn := old.Client(t).Conn()
	defer conn.Close()
	if err := conn.ReadOnly(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := conn.Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("GET %s on the rejoined replica = %q, %v; want v", key, got, err)
	}
	if n := len(c.Addrs()); n != 6 {
		t.Fatalf("Addrs has %d nodes after Rejoin, want 6", n)
	}
	for _, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		nodes, err := node.ClusterNodes(ctx).Result()
		_ = node.Close()
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(nodes), "\n")
		if len(lines) != 6 || strings.Contains(nodes, "fail") {
			t.Fatalf("node %s knows %d nodes, want 6 healthy:\n%s", addr, len(lines), nodes)
		}
	}
	primaries, err := c.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkShards(t, c, primaries)

	// The full cluster fails over again: the rejoined node takes back its
	// shard, with the write it synced.
	back, err := c.KillPrimary(ctx, promoted)
	if err != nil {
		t.Fatal(err)
	}
	if back != old {
		t.Fatalf("second KillPrimary promoted %s, want the rejoined %s", back.Addr, old.Addr)
	}
	if got, err := old.Client(t).Get(ctx, key).Result(); err != nil || got != "v" {
		t.Fatalf("GET %s on the rejoined node, now primary = %q, %v; want v", key, got, err)
	}
}

// TestClusterLossyFailover proves that LossyFailover loses exactly the
// write made during it: a marker key written then is gone afterwards, a key
// written before it is there.
func TestClusterLossyFailover(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := c.Client(t)

	const before, marker = "{lossy}before", "{lossy}marker"
	if err := rdb.Set(ctx, before, "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := c.PrimaryFor(ctx, before)
	if err != nil {
		t.Fatal(err)
	}
	promoted, err := c.LossyFailover(ctx, old, func() error {
		if err := rdb.Set(ctx, marker, "lost", 0).Err(); err != nil {
			return err
		}
		// The primary has the write: only the failover can lose it.
		got, err := rdb.Get(ctx, marker).Result()
		if err == nil && got != "lost" {
			err = fmt.Errorf("GET %s = %q on the old primary", marker, got)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if promoted == old || old.PID() != 0 {
		t.Fatalf("LossyFailover returned %s with the old primary %s at PID %d", promoted.Addr, old.Addr, old.PID())
	}
	if now, err := c.PrimaryFor(ctx, before); err != nil || now != promoted {
		t.Fatalf("PrimaryFor after LossyFailover = %v, %v; want %s", addrOf(now), err, promoted.Addr)
	}

	waitRouted(t, rdb, before, promoted)
	if err := rdb.Get(ctx, marker).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET %s after LossyFailover: %v, want redis.Nil: the write was not lost", marker, err)
	}
	if got, err := rdb.Get(ctx, before).Result(); err != nil || got != "kept" {
		t.Fatalf("GET %s after LossyFailover = %q, %v; want kept", before, got, err)
	}
}

// TestClusterRequirepass proves that a cluster whose nodes require a
// password forms and that a client from its Options works.
func TestClusterRequirepass(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1, "--requirepass", "secret", "--masterauth", "secret")
	ctx := context.Background()
	if pw := c.Options().Password; pw != "secret" {
		t.Fatalf("Options().Password = %q, want secret", pw)
	}
	rdb := c.Client(t)
	primaries, err := c.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range primaries {
		key := keyServedBy(t, c, p)
		if err := rdb.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		if got, err := rdb.Get(ctx, key).Int(); err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", key, got, err, i)
		}
	}
	checkShards(t, c, primaries)

	anon := redis.NewClient(&redis.Options{Addr: c.Addrs()[0], MaxRetries: -1})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("PING without the password: %v, want a NOAUTH error", err)
	}
}

// keyServedBy returns a key whose slot p serves.
func keyServedBy(t *testing.T, c *redistest.Cluster, p *redistest.Server) string {
	t.Helper()
	for i := range 1000 {
		key := fmt.Sprintf("key-%d", i)
		owner, err := c.PrimaryFor(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if owner == p {
			return key
		}
	}
	t.Fatalf("no key of 1000 is served by %s", p.Addr)
	return ""
}

// checkShards checks that CLUSTER SLOTS, on every node of c, lists one slot
// range for each of primaries, each with one replica that is not a primary.
// It asks each node itself: a cluster client may have loaded its slot map
// from a node that was joining.
func checkShards(t *testing.T, c *redistest.Cluster, primaries []*redistest.Server) {
	t.Helper()
	var addrs []string
	for _, p := range primaries {
		addrs = append(addrs, p.Addr)
	}
	for _, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr, Password: c.Options().Password})
		slots, err := node.ClusterSlots(context.Background()).Result()
		_ = node.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(slots) != len(primaries) {
			t.Fatalf("CLUSTER SLOTS on %s lists %d ranges, want %d: %v", addr, len(slots), len(primaries), slots)
		}
		seen := map[string]bool{}
		for _, r := range slots {
			if len(r.Nodes) != 2 {
				t.Fatalf("CLUSTER SLOTS on %s: slots %d-%d have %d nodes, want a primary and a replica: %v", addr, r.Start, r.End, len(r.Nodes), r.Nodes)
			}
			p, replica := r.Nodes[0].Addr, r.Nodes[1].Addr
			if !slices.Contains(addrs, p) || slices.Contains(addrs, replica) || seen[p] || seen[replica] {
				t.Fatalf("CLUSTER SLOTS on %s: slots %d-%d: primary %s, replica %s; primaries are %v", addr, r.Start, r.End, p, replica, addrs)
			}
			seen[p], seen[replica] = true, true
		}
	}
}

// myPorts returns the port and cluster bus port of the myself line of a
// CLUSTER NODES reply.
func myPorts(t *testing.T, nodes string) (port, bus int) {
	t.Helper()
	for line := range strings.Lines(nodes) {
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(f[2], "myself") {
			continue
		}
		addr, cport, _ := strings.Cut(strings.Split(f[1], ",")[0], "@")
		_, p, _ := net.SplitHostPort(addr)
		port, _ = strconv.Atoi(p)
		bus, _ = strconv.Atoi(cport)
		return port, bus
	}
	t.Fatalf("no myself line in CLUSTER NODES:\n%s", nodes)
	return 0, 0
}

// replication returns the role, master port and master link status in s's
// INFO replication.
func replication(t *testing.T, s *redistest.Server) (role string, masterPort int, link string) {
	t.Helper()
	info, err := s.Client(t).Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "role":
			role = v
		case "master_port":
			masterPort, _ = strconv.Atoi(v)
		case "master_link_status":
			link = v
		}
	}
	return role, masterPort, link
}

// waitRouted reloads rdb's slot map until it sends key to want.
func waitRouted(t *testing.T, rdb *redis.ClusterClient, key string, want *redistest.Server) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Second)
	for {
		rdb.ReloadState(ctx)
		node, err := rdb.MasterForKey(ctx, key)
		if err == nil && node.Options().Addr == want.Addr {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster client does not route %s to %s after ReloadState: %v", key, want.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// addrOf returns s's address, or "nil".
func addrOf(s *redistest.Server) string {
	if s == nil {
		return "nil"
	}
	return s.Addr
}

// TestClusterMigrateSlot proves that MigrateSlot moves a slot and all its
// keys to another primary, which then serves it to a cluster client.
func TestClusterMigrateSlot(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	rdb := c.Client(t)
	keys := []string{"{mig}a", "{mig}b", "{mig}c"}
	for _, k := range keys {
		if err := rdb.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	from, err := c.PrimaryFor(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	primaries, err := c.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := primaries[0]
	if to == from {
		to = primaries[1]
	}
	if got, err := c.MigrateSlot(ctx, keys[0], to); err != nil || got != from {
		t.Fatalf("MigrateSlot = %v, %v; want the former owner %s", addrOf(got), err, from.Addr)
	}
	if now, err := c.PrimaryFor(ctx, keys[0]); err != nil || now != to {
		t.Fatalf("PrimaryFor after MigrateSlot = %v, %v; want %s", addrOf(now), err, to.Addr)
	}
	if _, err := c.MigrateSlot(ctx, keys[0], to); err == nil {
		t.Fatal("MigrateSlot to the slot's owner: no error")
	}
	direct := to.Client(t)
	for _, k := range keys {
		if got, err := direct.Get(ctx, k).Result(); err != nil || got != k {
			t.Fatalf("GET %s on the new owner = %q, %v", k, got, err)
		}
		if got, err := rdb.Get(ctx, k).Result(); err != nil || got != k {
			t.Fatalf("GET %s through the cluster client = %q, %v", k, got, err)
		}
	}
	waitRouted(t, rdb, keys[0], to)
}
