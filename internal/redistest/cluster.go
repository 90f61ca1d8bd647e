package redistest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterWait bounds every wait of the cluster harness: forming, failing
// over, rejoining, flushing.
const clusterWait = 20 * time.Second

// slotCount is the number of hash slots of a Redis Cluster.
const slotCount = 16384

// Cluster is a Redis Cluster of redis-server processes on loopback, formed by
// the harness.
//
// Its nodes are Servers: Pause, Resume, Kill and PID work on them as on any
// other. A node is live while it runs and is not paused; the methods that ask
// the nodes ask only the live ones.
type Cluster struct {
	password string
	ranges   [][2]int // slot range of each shard, first to last

	mu     sync.Mutex
	nodes  []*Server
	ids    map[*Server]string // node id each node had when it last joined
	shards map[*Server]int    // index in ranges of the shard each node joined
}

// LaunchCluster starts primaries×(1+replicasEach) cluster-enabled
// redis-servers in dir, splits the 16384 slots evenly among the primaries,
// gives each primary replicasEach replicas and returns once every node says
// cluster_state:ok, every replica's link to its primary is up, and every node
// lists the same primaries and replicas in CLUSTER SLOTS.
//
// Every node listens on a port in 12000–22000 whose cluster bus port, port
// plus 10000, is free too, so that neither is in the ephemeral range. extra is
// added to every node's command line; if it sets "--requirepass" but not
// "--masterauth", the password is used as masterauth too, so that replicas
// can sync.
func LaunchCluster(dir string, primaries, replicasEach int, extra ...string) (*Cluster, error) {
	if primaries < 1 || replicasEach < 0 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 1 primary and no negative replica count, not %d and %d", primaries, replicasEach)
	}
	c := &Cluster{password: requirepass(extra), ids: map[*Server]string{}, shards: map[*Server]int{}}
	for i := range primaries {
		c.ranges = append(c.ranges, [2]int{i * slotCount / primaries, (i+1)*slotCount/primaries - 1})
	}
	auth := []string(nil)
	if c.password != "" && !slices.Contains(extra, "--masterauth") {
		auth = []string{"--masterauth", c.password}
	}
	args := func(port int) []string {
		a := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
			"--cluster-node-timeout", "1000",
			"--cluster-replica-validity-factor", "0",
			"--repl-ping-replica-period", "1",
			"--repl-diskless-sync-delay", "0",
		}
		a = append(a, auth...)
		return append(a, extra...)
	}
	for range primaries * (1 + replicasEach) {
		s, err := launch(dir, clusterPort, args)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.nodes = append(c.nodes, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterWait)
	defer cancel()
	if err := c.form(ctx, primaries, replicasEach); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// StartCluster is LaunchCluster for a test, in t.TempDir(): the cluster is
// closed when the test ends, and a failure to form it fails the test.
func StartCluster(t testing.TB, primaries, replicasEach int, extra ...string) *Cluster {
	t.Helper()
	Full(t, "a Cluster")
	c, err := LaunchCluster(t.TempDir(), primaries, replicasEach, extra...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// form makes a cluster of the fresh nodes: the first primaries nodes get the
// slots, the others replicate them in turn, replicasEach each.
func (c *Cluster) form(ctx context.Context, primaries, replicasEach int) error {
	for i, s := range c.nodes {
		rdb := nodeClient(s)
		id, err := rdb.ClusterMyID(ctx).Result()
		if err == nil {
			// Distinct epochs from the start spare the nodes resolving
			// a collision, as redis-cli --cluster create does.
			err = rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err()
		}
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("redistest: prepare cluster node %s: %w", s.Addr, err)
		}
		c.ids[s] = id
		if i < primaries {
			c.shards[s] = i
		} else {
			c.shards[s] = (i - primaries) / replicasEach
		}
	}
	first := nodeClient(c.nodes[0])
	defer first.Close()
	for _, s := range c.nodes[1:] {
		if err := first.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(s.Port)).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s: %w", s.Addr, err)
		}
	}
	for i, s := range c.nodes[:primaries] {
		rdb := nodeClient(s)
		err := rdb.ClusterAddSlotsRange(ctx, c.ranges[i][0], c.ranges[i][1]).Err()
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %w", c.ranges[i][0], c.ranges[i][1], s.Addr, err)
		}
	}
	for _, s := range c.nodes[primaries:] {
		primary := c.nodes[c.shards[s]]
		if err := replicate(ctx, s, primary, c.ids[primary]); err != nil {
			return err
		}
	}
	return c.waitSettled(ctx, "the new cluster to be ready", nil)
}

// replicate makes s a replica of primary, whose node id is id, once s has
// learned of it.
func replicate(ctx context.Context, s, primary *Server, id string) error {
	rdb := nodeClient(s)
	defer rdb.Close()
	return poll(ctx, fmt.Sprintf("%s to accept CLUSTER REPLICATE %s (%s)", s.Addr, id, primary.Addr), func() error {
		return rdb.ClusterReplicate(ctx, id).Err()
	})
}

// Close kills every node and waits for them to exit.
func (c *Cluster) Close() error {
	var errs []error
	for _, s := range c.servers() {
		errs = append(errs, s.Kill())
	}
	return errors.Join(errs...)
}

// Addrs returns the host:port of every running node, paused ones included.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, s := range c.servers() {
		if s.PID() != 0 {
			addrs = append(addrs, s.Addr)
		}
	}
	return addrs
}

// Options returns go-redis cluster options: the running nodes' addresses, and
// the password if the cluster was started with one.
func (c *Cluster) Options() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs(), Password: c.password}
}

// Client returns a go-redis cluster client for c, closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	rdb := redis.NewClusterClient(c.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Primaries asks the live nodes which of them are primaries serving slots
// now, and returns those in the order of their first slot.
func (c *Cluster) Primaries(ctx context.Context) ([]*Server, error) {
	selves, err := c.selves(ctx)
	if err != nil {
		return nil, err
	}
	var ps []self
	for _, n := range selves {
		if n.entry.primary() && len(n.entry.slots) > 0 {
			ps = append(ps, n)
		}
	}
	slices.SortFunc(ps, func(a, b self) int { return a.entry.slots[0][0] - b.entry.slots[0][0] })
	out := make([]*Server, len(ps))
	for i, p := range ps {
		out[i] = p.s
	}
	return out, nil
}

// PrimaryFor returns the live primary serving key's slot now: the one that
// claims the slot itself, or, while two do during a failover, the one with
// the higher config epoch.
func (c *Cluster) PrimaryFor(ctx context.Context, key string) (*Server, error) {
	slot, err := c.slotOf(ctx, key)
	if err != nil {
		return nil, err
	}
	return c.primaryForSlot(ctx, slot)
}

// slotOf asks a live node for key's hash slot.
func (c *Cluster) slotOf(ctx context.Context, key string) (int, error) {
	live := c.live()
	if len(live) == 0 {
		return 0, errors.New("redistest: no live cluster node")
	}
	rdb := nodeClient(live[0])
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	_ = rdb.Close()
	if err != nil {
		return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT %q: %w", key, err)
	}
	return int(slot), nil
}

// primaryForSlot returns the live primary that claims slot, the one with the
// highest config epoch if several do.
func (c *Cluster) primaryForSlot(ctx context.Context, slot int) (*Server, error) {
	selves, err := c.selves(ctx)
	if err != nil {
		return nil, err
	}
	var best *self
	for i, n := range selves {
		if n.entry.primary() && n.entry.serves(slot) && (best == nil || n.entry.epoch > best.entry.epoch) {
			best = &selves[i]
		}
	}
	if best == nil {
		return nil, fmt.Errorf("redistest: no live primary serves slot %d", slot)
	}
	return best.s, nil
}

// ReplicaOf returns a live replica of primary, one whose link to it is up if
// there is one.
func (c *Cluster) ReplicaOf(ctx context.Context, primary *Server) (*Server, error) {
	if !slices.Contains(c.servers(), primary) {
		return nil, fmt.Errorf("redistest: %s is not a node of this cluster", primary.Addr)
	}
	p, err := selfOf(ctx, primary)
	if err != nil {
		return nil, err
	}
	if !p.primary() || len(p.slots) == 0 {
		return nil, fmt.Errorf("redistest: %s is not a primary serving slots", primary.Addr)
	}
	selves, err := c.selves(ctx)
	if err != nil {
		return nil, err
	}
	var found *Server
	for _, n := range selves {
		if n.entry.master != p.id {
			continue
		}
		if up, err := linkUp(ctx, n.s); err == nil && up {
			return n.s, nil
		}
		if found == nil {
			found = n.s
		}
	}
	if found == nil {
		return nil, fmt.Errorf("redistest: primary %s has no live replica", primary.Addr)
	}
	return found, nil
}

// Failover runs CLUSTER FAILOVER on a replica of primary, which takes over
// once it has every write of primary, and returns the replica once every live
// node agrees that it is the primary and the old primary its replica, every
// node says cluster_state:ok and every replica's link is up.
func (c *Cluster) Failover(ctx context.Context, primary *Server) (*Server, error) {
	r, err := c.ReplicaOf(ctx, primary)
	if err != nil {
		return nil, err
	}
	rdb := nodeClient(r)
	defer rdb.Close()
	asked := time.Time{}
	err = c.waitSettled(ctx, fmt.Sprintf("replica %s to take over from %s by CLUSTER FAILOVER", r.Addr, primary.Addr), func(states []*nodeState) error {
		if err := promoted(states, r, primary); err == nil {
			return nil
		} else if time.Since(asked) < 5*time.Second {
			return err
		}
		// A manual failover the primary did not answer in time is given
		// up by the replica: ask again.
		asked = time.Now()
		if err := rdb.ClusterFailover(ctx).Err(); err != nil {
			return fmt.Errorf("CLUSTER FAILOVER on %s: %w", r.Addr, err)
		}
		return errors.New("CLUSTER FAILOVER sent")
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// KillPrimary kills primary with SIGKILL and returns a replica of it once
// that replica has been elected primary, every live node agrees, says
// cluster_state:ok and every live replica's link is up.
//
// The other primaries elect the replica, and a majority of all primaries must
// vote: KillPrimary needs at least 3 live primaries.
func (c *Cluster) KillPrimary(ctx context.Context, primary *Server) (*Server, error) {
	r, err := c.electable(ctx, primary)
	if err != nil {
		return nil, err
	}
	if err := primary.Kill(); err != nil {
		return nil, fmt.Errorf("redistest: kill %s: %w", primary.Addr, err)
	}
	return r, c.waitPromoted(ctx, r, primary)
}

// LossyFailover fails primary over to a replica that lacks the writes of
// write, which the caller makes through its own client: it waits for the
// replica to have every earlier write, stops it with SIGSTOP, disconnects it
// from primary with CLIENT KILL TYPE replica, runs write, kills primary with
// SIGKILL, continues the replica with SIGCONT and returns it once it has
// been elected primary as in KillPrimary, which needs at least 3 live
// primaries. What write wrote to primary is gone.
func (c *Cluster) LossyFailover(ctx context.Context, primary *Server, write func() error) (*Server, error) {
	r, err := c.electable(ctx, primary)
	if err != nil {
		return nil, err
	}
	if err := waitCaughtUp(ctx, primary, r); err != nil {
		return nil, err
	}
	if err := r.Pause(); err != nil {
		return nil, fmt.Errorf("redistest: pause replica %s: %w", r.Addr, err)
	}
	prdb := nodeClient(primary)
	err = prdb.ClientKillByFilter(ctx, "TYPE", "replica").Err()
	_ = prdb.Close()
	if err != nil {
		_ = r.Resume()
		return nil, fmt.Errorf("redistest: CLIENT KILL TYPE replica on %s: %w", primary.Addr, err)
	}
	if err := write(); err != nil {
		_ = r.Resume()
		return nil, fmt.Errorf("redistest: write during lossy failover of %s: %w", primary.Addr, err)
	}
	killErr := primary.Kill()
	if err := r.Resume(); err != nil {
		return nil, fmt.Errorf("redistest: resume replica %s: %w", r.Addr, err)
	}
	if killErr != nil {
		return nil, fmt.Errorf("redistest: kill %s: %w", primary.Addr, killErr)
	}
	return r, c.waitPromoted(ctx, r, primary)
}

// Rejoin restarts the killed node s empty, with a fresh node id, and makes it
// a replica of the primary now serving the shard it left, or, if no live
// primary does, of the primary with the fewest replicas. The live nodes
// forget its old id first. It returns once s is in sync with its primary and
// the whole cluster has settled as after LaunchCluster.
//
// For a moment after its restart s knows no other node and answers CLUSTER
// SLOTS with no slots: a cluster client that loads its slot map from s then
// finds no primary for keyless commands until it loads it again. Call its
// ReloadState after Rejoin.
func (c *Cluster) Rejoin(ctx context.Context, s *Server) error {
	c.mu.Lock()
	oldID, shard, ok := c.ids[s], c.shards[s], slices.Contains(c.nodes, s)
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("redistest: %s is not a node of this cluster", s.Addr)
	}
	if s.PID() != 0 {
		return fmt.Errorf("redistest: %s is still running; kill it before Rejoin", s.Addr)
	}
	for _, n := range c.live() {
		rdb := nodeClient(n)
		err := poll(ctx, fmt.Sprintf("%s to forget node %s (%s)", n.Addr, oldID, s.Addr), func() error {
			err := rdb.ClusterForget(ctx, oldID).Err()
			if err != nil && strings.Contains(err.Error(), "Unknown node") {
				return nil
			}
			return err
		})
		_ = rdb.Close()
		if err != nil {
			return err
		}
	}

	primary, err := c.primaryForSlot(ctx, c.ranges[shard][0])
	if err != nil {
		if primary, err = c.leastReplicated(ctx); err != nil {
			return err
		}
	}
	p, err := selfOf(ctx, primary)
	if err != nil {
		return err
	}
	for i, r := range c.ranges {
		if p.serves(r[0]) {
			shard = i
		}
	}

	if err := os.Remove(filepath.Join(s.dir, fmt.Sprintf("nodes-%d.conf", s.Port))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("redistest: remove the old cluster config of %s: %w", s.Addr, err)
	}
	if err := s.Restart(); err != nil {
		return err
	}
	rdb := nodeClient(s)
	defer rdb.Close()
	id, err := rdb.ClusterMyID(ctx).Result()
	if err != nil {
		return fmt.Errorf("redistest: CLUSTER MYID on restarted %s: %w", s.Addr, err)
	}
	c.mu.Lock()
	c.ids[s], c.shards[s] = id, shard
	c.mu.Unlock()
	if err := rdb.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(primary.Port)).Err(); err != nil {
		return fmt.Errorf("redistest: CLUSTER MEET %s from %s: %w", primary.Addr, s.Addr, err)
	}
	if err := replicate(ctx, s, primary, p.id); err != nil {
		return err
	}
	return c.waitSettled(ctx, fmt.Sprintf("%s to rejoin as a replica of %s", s.Addr, primary.Addr), func(states []*nodeState) error {
		for _, st := range states {
			if st.s == s {
				if st.self.master != p.id {
					return fmt.Errorf("%s replicates %q, not %s", s.Addr, st.self.master, p.id)
				}
				return nil
			}
		}
		return fmt.Errorf("%s does not answer", s.Addr)
	})
}

// leastReplicated returns the live primary with the fewest live replicas.
func (c *Cluster) leastReplicated(ctx context.Context) (*Server, error) {
	selves, err := c.selves(ctx)
	if err != nil {
		return nil, err
	}
	replicas := map[string]int{}
	for _, n := range selves {
		if !n.entry.primary() {
			replicas[n.entry.master]++
		}
	}
	var best *self
	for i, n := range selves {
		if n.entry.primary() && len(n.entry.slots) > 0 && (best == nil || replicas[n.entry.id] < replicas[best.entry.id]) {
			best = &selves[i]
		}
	}
	if best == nil {
		return nil, errors.New("redistest: no live primary to replicate")
	}
	return best.s, nil
}

// MigrateSlot moves the hash slot of key, with its keys, from the primary
// that serves it to primary to, as redis-cli --cluster reshard does: the slot
// is marked importing on to and migrating on its owner, its keys move in
// batches with MIGRATE, and then every primary is told its new owner. It
// returns the former owner once every live primary says to serves the slot.
// Between the marks and the end, clients meet ASK and TRYAGAIN replies, as
// during any reshard. Rejoin expects the slots where LaunchCluster put them:
// do not rejoin a node after moving slots.
func (c *Cluster) MigrateSlot(ctx context.Context, key string, to *Server) (*Server, error) {
	return c.MigrateSlotMidway(ctx, key, to, nil)
}

// MigrateSlotMidway is MigrateSlot, calling midway, if not nil, once every
// key has moved and before the slot is handed over: while it runs, the
// slot is migrating on its owner and importing on to, with every key on to.
func (c *Cluster) MigrateSlotMidway(ctx context.Context, key string, to *Server, midway func() error) (*Server, error) {
	slot, err := c.slotOf(ctx, key)
	if err != nil {
		return nil, err
	}
	from, err := c.primaryForSlot(ctx, slot)
	if err != nil {
		return nil, err
	}
	if from == to {
		return nil, fmt.Errorf("redistest: %s serves slot %d already", to.Addr, slot)
	}
	fromSelf, err := selfOf(ctx, from)
	if err != nil {
		return nil, err
	}
	toSelf, err := selfOf(ctx, to)
	if err != nil {
		return nil, err
	}
	if !toSelf.primary() {
		return nil, fmt.Errorf("redistest: %s is not a primary", to.Addr)
	}
	src, dst := nodeClient(from), nodeClient(to)
	defer src.Close()
	defer dst.Close()
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromSelf.id).Err(); err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER SETSLOT %d IMPORTING on %s: %w", slot, to.Addr, err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toSelf.id).Err(); err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER SETSLOT %d MIGRATING on %s: %w", slot, from.Addr, err)
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return nil, fmt.Errorf("redistest: CLUSTER GETKEYSINSLOT %d on %s: %w", slot, from.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.Port, "", 0, 5000}
		if c.password != "" {
			args = append(args, "AUTH", c.password)
		}
		args = append(args, "KEYS")
		for _, k := range keys {
			args = append(args, k)
		}
		if err := src.Do(ctx, args...).Err(); err != nil {
			return nil, fmt.Errorf("redistest: MIGRATE %d keys of slot %d from %s to %s: %w", len(keys), slot, from.Addr, to.Addr, err)
		}
	}
	if midway != nil {
		if err := midway(); err != nil {
			return nil, err
		}
	}
	// The new owner first, then the old one, then everyone else.
	primaries, err := c.Primaries(ctx)
	if err != nil {
		return nil, err
	}
	order := []*Server{to, from}
	for _, p := range primaries {
		if p != to && p != from {
			order = append(order, p)
		}
	}
	for _, p := range order {
		n := nodeClient(p)
		err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toSelf.id).Err()
		_ = n.Close()
		if err != nil {
			return nil, fmt.Errorf("redistest: CLUSTER SETSLOT %d NODE on %s: %w", slot, p.Addr, err)
		}
	}
	err = poll(ctx, fmt.Sprintf("every primary to give slot %d to %s", slot, to.Addr), func() error {
		for _, p := range c.live() {
			e, err := selfOf(ctx, p)
			if err != nil {
				return err
			}
			if e.primary() && e.id != toSelf.id && e.serves(slot) {
				return fmt.Errorf("%s still serves it", p.Addr)
			}
		}
		if owner, err := c.primaryForSlot(ctx, slot); err != nil || owner != to {
			return fmt.Errorf("owner %v (%v)", owner, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return from, nil
}

// Flush runs FLUSHALL on every primary and then WAIT for its live replicas,
// so that they are empty too when it returns.
func (c *Cluster) Flush(ctx context.Context) error {
	selves, err := c.selves(ctx)
	if err != nil {
		return err
	}
	for _, p := range selves {
		if !p.entry.primary() || len(p.entry.slots) == 0 {
			continue
		}
		n := 0
		for _, r := range selves {
			if r.entry.master == p.entry.id {
				n++
			}
		}
		rdb := redis.NewClient(&redis.Options{
			Addr: p.s.Addr, Password: p.s.Password,
			MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
			ReadTimeout: clusterWait + 5*time.Second,
		})
		var wait *redis.Cmd
		_, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.FlushAll(ctx) // on the same connection as WAIT
			wait = pipe.Do(ctx, "WAIT", n, clusterWait.Milliseconds())
			return nil
		})
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("redistest: FLUSHALL and WAIT %d on %s: %w", n, p.s.Addr, err)
		}
		if acked, _ := wait.Int(); acked < n {
			return fmt.Errorf("redistest: waiting for the %d replicas of %s to flush: WAIT says %d did in %v", n, p.s.Addr, acked, clusterWait)
		}
	}
	return nil
}

// electable returns a replica of primary that the other primaries can elect
// once primary is dead: there must be at least 3 live primaries, so that
// those left are a majority.
func (c *Cluster) electable(ctx context.Context, primary *Server) (*Server, error) {
	ps, err := c.Primaries(ctx)
	if err != nil {
		return nil, err
	}
	if len(ps) < 3 {
		return nil, fmt.Errorf("redistest: the cluster has %d live primaries; electing a replica in place of a dead one takes a majority of them, so at least 3", len(ps))
	}
	return c.ReplicaOf(ctx, primary)
}

// waitPromoted waits until r has replaced the dead primary old and the
// cluster has settled.
func (c *Cluster) waitPromoted(ctx context.Context, r, old *Server) error {
	return c.waitSettled(ctx, fmt.Sprintf("replica %s to be elected primary in place of %s", r.Addr, old.Addr), func(states []*nodeState) error {
		return promoted(states, r, old)
	})
}

// promoted checks that r serves slots as a primary and that old, if it is
// live, is a replica of r.
func promoted(states []*nodeState, r, old *Server) error {
	var rid string
	for _, st := range states {
		if st.s == r {
			if !st.self.primary() || len(st.self.slots) == 0 {
				return fmt.Errorf("%s is not a primary yet", r.Addr)
			}
			rid = st.self.id
		}
	}
	if rid == "" {
		return fmt.Errorf("%s does not answer", r.Addr)
	}
	for _, st := range states {
		if st.s == old && st.self.master != rid {
			return fmt.Errorf("old primary %s does not replicate %s yet", old.Addr, r.Addr)
		}
	}
	return nil
}

// waitCaughtUp waits until replica r has processed everything primary has
// sent it so far.
func waitCaughtUp(ctx context.Context, primary, r *Server) error {
	prdb, rrdb := nodeClient(primary), nodeClient(r)
	defer prdb.Close()
	defer rrdb.Close()
	info, err := prdb.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("redistest: INFO replication on %s: %w", primary.Addr, err)
	}
	want, err := strconv.ParseInt(infoField(info, "master_repl_offset"), 10, 64)
	if err != nil {
		return fmt.Errorf("redistest: master_repl_offset of %s: %w", primary.Addr, err)
	}
	return poll(ctx, fmt.Sprintf("replica %s to reach offset %d of %s", r.Addr, want, primary.Addr), func() error {
		info, err := rrdb.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		got, _ := strconv.ParseInt(infoField(info, "slave_repl_offset"), 10, 64)
		if infoField(info, "master_link_status") != "up" || got < want {
			return fmt.Errorf("link %s at offset %d", infoField(info, "master_link_status"), got)
		}
		return nil
	})
}

// servers returns the nodes, live or not.
func (c *Cluster) servers() []*Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// live returns the nodes that run and are not paused.
func (c *Cluster) live() []*Server {
	var live []*Server
	for _, s := range c.servers() {
		if s.answers() {
			live = append(live, s)
		}
	}
	return live
}

// self is a live node and what it says of itself in CLUSTER NODES.
type self struct {
	s     *Server
	entry nodeEntry
}

// selves asks every live node what it is.
func (c *Cluster) selves(ctx context.Context) ([]self, error) {
	var out []self
	for _, s := range c.live() {
		e, err := selfOf(ctx, s)
		if err != nil {
			return nil, err
		}
		out = append(out, self{s, e})
	}
	return out, nil
}

// selfOf returns the "myself" line of s's CLUSTER NODES.
func selfOf(ctx context.Context, s *Server) (nodeEntry, error) {
	rdb := nodeClient(s)
	defer rdb.Close()
	text, err := rdb.ClusterNodes(ctx).Result()
	if err != nil {
		return nodeEntry{}, fmt.Errorf("redistest: CLUSTER NODES on %s: %w", s.Addr, err)
	}
	entries, err := parseClusterNodes(text)
	if err != nil {
		return nodeEntry{}, fmt.Errorf("redistest: CLUSTER NODES on %s: %w", s.Addr, err)
	}
	for _, e := range entries {
		if e.flags["myself"] {
			return e, nil
		}
	}
	return nodeEntry{}, fmt.Errorf("redistest: CLUSTER NODES on %s has no myself line", s.Addr)
}

// linkUp reports whether replica s has its replication link up.
func linkUp(ctx context.Context, s *Server) (bool, error) {
	rdb := nodeClient(s)
	defer rdb.Close()
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return false, err
	}
	return infoField(info, "master_link_status") == "up", nil
}

// nodeState is what one live node says of the cluster.
type nodeState struct {
	s       *Server
	self    nodeEntry
	known   map[string]nodeEntry // CLUSTER NODES by id
	stateOK bool                 // cluster_state:ok
	linkUp  bool                 // master_link_status:up
	slots   []redis.ClusterSlot
}

// state asks s for its view of the cluster.
func state(ctx context.Context, s *Server) (*nodeState, error) {
	rdb := nodeClient(s)
	defer rdb.Close()
	var nodes, info, repl *redis.StringCmd
	var slots *redis.ClusterSlotsCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		nodes = p.ClusterNodes(ctx)
		info = p.ClusterInfo(ctx)
		repl = p.Info(ctx, "replication")
		slots = p.ClusterSlots(ctx)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ask %s: %w", s.Addr, err)
	}
	entries, err := parseClusterNodes(nodes.Val())
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", s.Addr, err)
	}
	st := &nodeState{
		s:       s,
		known:   map[string]nodeEntry{},
		stateOK: infoField(info.Val(), "cluster_state") == "ok",
		linkUp:  infoField(repl.Val(), "master_link_status") == "up",
		slots:   slots.Val(),
	}
	for _, e := range entries {
		st.known[e.id] = e
		if e.flags["myself"] {
			st.self = e
		}
	}
	if st.self.id == "" {
		return nil, fmt.Errorf("CLUSTER NODES on %s has no myself line", s.Addr)
	}
	return st, nil
}

// waitSettled waits, within clusterWait and ctx, until the live nodes agree
// and also, unless it is nil, until cond holds of their states. The live
// nodes agree when each says cluster_state:ok; each replica's link is up;
// each knows every other live node, as healthy and in the role and slots
// that node gives itself; and each lists in CLUSTER SLOTS every live primary
// with its slots and live replicas. Dead and paused nodes are left out.
func (c *Cluster) waitSettled(ctx context.Context, what string, cond func([]*nodeState) error) error {
	return poll(ctx, what, func() error {
		var states []*nodeState
		for _, s := range c.live() {
			st, err := state(ctx, s)
			if err != nil {
				return err
			}
			states = append(states, st)
		}
		if err := agree(states); err != nil {
			return err
		}
		if cond != nil {
			return cond(states)
		}
		return nil
	})
}

// agree checks that the live nodes' states agree, as waitSettled describes.
func agree(states []*nodeState) error {
	for _, st := range states {
		if !st.stateOK {
			return fmt.Errorf("%s: cluster_state is not ok", st.s.Addr)
		}
		if !st.self.primary() && !st.linkUp {
			return fmt.Errorf("%s: replication link is not up", st.s.Addr)
		}
	}
	for _, l := range states {
		for _, n := range states {
			e, ok := l.known[n.self.id]
			switch {
			case !ok:
				return fmt.Errorf("%s does not know %s yet", l.s.Addr, n.s.Addr)
			case e.flags["fail"] || e.flags["fail?"] || e.flags["handshake"] || e.flags["noaddr"]:
				return fmt.Errorf("%s sees %s as %s", l.s.Addr, n.s.Addr, e.flagList)
			case e.primary() != n.self.primary() || e.master != n.self.master:
				return fmt.Errorf("%s sees %s as %s of %s, it says %s of %s", l.s.Addr, n.s.Addr, e.role(), e.master, n.self.role(), n.self.master)
			case !slices.Equal(e.slots, n.self.slots):
				return fmt.Errorf("%s sees %s serving slots %v, it says %v", l.s.Addr, n.s.Addr, e.slots, n.self.slots)
			}
		}
		if err := slotsAgree(l, states); err != nil {
			return err
		}
	}
	return nil
}

// slotsAgree checks that l's CLUSTER SLOTS gives every live primary the
// slots it claims, with all its live replicas.
func slotsAgree(l *nodeState, states []*nodeState) error {
	type shard struct {
		ranges   [][2]int
		replicas map[int]int // port: number of ranges listing it
	}
	byPort := map[int]*shard{}
	for _, r := range l.slots {
		if len(r.Nodes) == 0 {
			continue
		}
		port := addrPort(r.Nodes[0].Addr)
		sh := byPort[port]
		if sh == nil {
			sh = &shard{replicas: map[int]int{}}
			byPort[port] = sh
		}
		sh.ranges = append(sh.ranges, [2]int{r.Start, r.End})
		for _, n := range r.Nodes[1:] {
			sh.replicas[addrPort(n.Addr)]++
		}
	}
	for _, p := range states {
		if !p.self.primary() || len(p.self.slots) == 0 {
			continue
		}
		sh := byPort[p.s.Port]
		if sh == nil {
			return fmt.Errorf("CLUSTER SLOTS on %s does not list primary %s", l.s.Addr, p.s.Addr)
		}
		if got := mergeRanges(sh.ranges); !slices.Equal(got, p.self.slots) {
			return fmt.Errorf("CLUSTER SLOTS on %s gives %s slots %v, it says %v", l.s.Addr, p.s.Addr, got, p.self.slots)
		}
		for _, r := range states {
			if r.self.master == p.self.id && sh.replicas[r.s.Port] != len(sh.ranges) {
				return fmt.Errorf("CLUSTER SLOTS on %s does not list replica %s of %s yet", l.s.Addr, r.s.Addr, p.s.Addr)
			}
		}
	}
	return nil
}

// nodeEntry is one line of CLUSTER NODES.
type nodeEntry struct {
	id       string
	port     int
	flagList string
	flags    map[string]bool
	master   string // id of the primary of a replica, "" for a primary
	epoch    int64
	slots    [][2]int // merged, ascending
}

func (e nodeEntry) primary() bool { return e.flags["master"] }

func (e nodeEntry) role() string {
	if e.primary() {
		return "primary"
	}
	return "replica"
}

// serves reports whether e claims slot.
func (e nodeEntry) serves(slot int) bool {
	for _, r := range e.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// parseClusterNodes parses a CLUSTER NODES reply.
func parseClusterNodes(text string) ([]nodeEntry, error) {
	var out []nodeEntry
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("short line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		e := nodeEntry{id: f[0], port: addrPort(addr), flagList: f[2], flags: map[string]bool{}}
		for _, fl := range strings.Split(f[2], ",") {
			e.flags[fl] = true
		}
		if f[3] != "-" {
			e.master = f[3]
		}
		e.epoch, _ = strconv.ParseInt(f[6], 10, 64)
		var ranges [][2]int
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") { // a slot being migrated or imported
				continue
			}
			lo, hi, isRange := strings.Cut(sl, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("bad slot %q in %q", sl, line)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("bad slot %q in %q", sl, line)
				}
			}
			ranges = append(ranges, [2]int{a, b})
		}
		e.slots = mergeRanges(ranges)
		out = append(out, e)
	}
	return out, nil
}

// mergeRanges sorts slot ranges and joins those that touch.
func mergeRanges(rs [][2]int) [][2]int {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b [2]int) int { return a[0] - b[0] })
	var out [][2]int
	for _, r := range rs {
		if n := len(out); n > 0 && r[0] <= out[n-1][1]+1 {
			out[n-1][1] = max(out[n-1][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

// addrPort returns the port of host:port, or 0.
func addrPort(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	port, _ := strconv.Atoi(p)
	return port
}

// infoField returns the value of field in an INFO or CLUSTER INFO reply.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// nodeClient returns a client for one node, for the harness's own commands:
// no retries, short timeouts, one connection.
func nodeClient(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: s.Addr, Password: s.Password,
		MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second,
	})
}

// poll calls try until it returns nil, for at most clusterWait and while ctx
// lasts, and otherwise says what it waited for and try's last error.
func poll(ctx context.Context, what string, try func() error) error {
	deadline := time.Now().Add(clusterWait)
	for {
		err := try()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: gave up after %v waiting for %s: %w", clusterWait, what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterPort returns a port in 12000–22000 that is free on loopback and
// whose cluster bus port, port+10000, is free too, neither ever given to a
// server of this process (claim). Both are below the ephemeral range, so no
// outgoing connection takes them meanwhile.
func clusterPort() (int, error) {
	for range 200 {
		port := 12000 + rand.IntN(10000)
		if portFree(port) && portFree(port+10000) && claim(port, port+10000) {
			return port, nil
		}
	}
	return 0, errors.New("redistest: found no free port p in 12000–22000 with p+10000 free too")
}

// portFree reports whether port can be listened on at 127.0.0.1 now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
