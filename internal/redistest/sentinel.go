package redistest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name under which the sentinels of a Sentinel
// monitor its primary: the MasterName of FailoverOptions.
const SentinelMaster = "dlock"

// Sentinel timing. A primary that does not answer for sentinelDownAfter is
// subjectively down; a sentinel that gave up a failover, or voted for another
// leader, tries again after twice sentinelFailoverTimeout.
const (
	sentinelDownAfter       = time.Second
	sentinelFailoverTimeout = 3 * time.Second
)

// Sentinel is one primary, its replicas and the Redis Sentinels that monitor
// it under the name SentinelMaster, all redis-server processes on loopback,
// started by the harness.
//
// The data servers and the sentinels are Servers: Pause, Resume, Kill and PID
// work on them as on any other. A process is live while it runs and is not
// paused; the methods that ask the processes ask only the live ones. Every
// wait is bounded, by ctx and by poll's limit of 20 s.
//
// The methods may be called from several goroutines, but those that inject a
// fault or restart a process (Failover, KillPrimary, Rejoin, Lag,
// LossyFailover, LossyFailoverTo, RestartPrimaryEmpty) are meant to run one
// at a time.
type Sentinel struct {
	password  string
	servers   []*Server // data servers, the first primary at launch
	sentinels []*Server
}

// LaunchSentinel starts, in dir, a primary, replicas replicas of it and
// sentinels sentinels monitoring it with a quorum of sentinels/2+1. It
// returns once the primary answers, every replica's replication link is up,
// and every sentinel names the primary (SENTINEL GET-MASTER-ADDR-BY-NAME),
// lists every replica as healthy (SENTINEL REPLICAS) and knows every other
// sentinel (SENTINEL SENTINELS): a failover can start at once.
//
// extra is added to the data servers' command lines, not to the sentinels'.
// If it sets "--requirepass" but not "--masterauth", the password is used as
// masterauth too, so that replicas can sync, and the sentinels are given it
// with "sentinel auth-pass". The sentinels themselves need no password.
//
// Every process listens on a port in 12000–22000, below the ephemeral range,
// so that no outgoing connection takes it while a killed process is down.
// A primary is subjectively down after 1 s without an answer
// (down-after-milliseconds 1000), and the failover timeout is 3 s.
func LaunchSentinel(dir string, replicas, sentinels int, extra ...string) (*Sentinel, error) {
	if replicas < 0 || sentinels < 1 {
		return nil, fmt.Errorf("redistest: a sentinel set-up needs no negative replica count and at least 1 sentinel, not %d and %d", replicas, sentinels)
	}
	s := &Sentinel{password: requirepass(extra)}
	auth := []string(nil)
	if s.password != "" && !slices.Contains(extra, "--masterauth") {
		auth = []string{"--masterauth", s.password}
	}
	// Each data server keeps the RDB file it receives in a full sync under
	// a name of its own, so that no other server loads it (see restartEmpty).
	base := func(port int) []string {
		a := []string{
			"--repl-ping-replica-period", "1",
			"--repl-diskless-sync-delay", "0",
			"--replica-priority", "100",
			"--dbfilename", fmt.Sprintf("dump-%d.rdb", port),
		}
		a = append(a, auth...)
		return append(a, extra...)
	}
	primary, err := launch(dir, stablePort, base)
	if err != nil {
		return nil, err
	}
	s.servers = append(s.servers, primary)
	for range replicas {
		r, err := launch(dir, stablePort, func(port int) []string {
			return append(base(port), "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
		})
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.servers = append(s.servers, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*clusterWait)
	defer cancel()
	// A sentinel learns the replicas from the primary's INFO, which it asks
	// for when it connects and then every 10 s: start the sentinels once the
	// primary lists every replica.
	for _, r := range s.servers[1:] {
		if err := waitLinked(ctx, r, primary); err != nil {
			_ = s.Close()
			return nil, err
		}
	}
	for range sentinels {
		sn, err := launchSentinel(dir, primary, sentinels/2+1, s.password, max(1, replicas))
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.sentinels = append(s.sentinels, sn)
	}
	err = poll(ctx, "the new sentinel set-up to be ready", func() error {
		_, err := s.settled(ctx)
		return err
	})
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// StartSentinel is LaunchSentinel for a test, in t.TempDir(): the set-up is
// closed when the test ends, and a failure to start it fails the test.
func StartSentinel(t testing.TB, replicas, sentinels int, extra ...string) *Sentinel {
	t.Helper()
	Full(t, "a Sentinel set-up")
	s, err := LaunchSentinel(t.TempDir(), replicas, sentinels, extra...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// launchSentinel starts a sentinel that monitors primary as SentinelMaster
// with quorum, authenticating with password if it is not "" and letting
// parallel replicas resync with a new primary at once. Its configuration
// file, which a sentinel rewrites as it learns, is in dir. It tries five
// ports before it gives up.
func launchSentinel(dir string, primary *Server, quorum int, password string, parallel int) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range 5 {
		port, err := stablePort()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
		var b strings.Builder
		fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\ndaemonize no\n", port)
		fmt.Fprintf(&b, "dir %s\nlogfile %s\n", confQuote(dir), confQuote(filepath.Join(dir, fmt.Sprintf("redis-%d.log", port))))
		fmt.Fprintf(&b, "sentinel resolve-hostnames no\nsentinel announce-hostnames no\n")
		fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d %d\n", SentinelMaster, primary.Port, quorum)
		fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", SentinelMaster, sentinelDownAfter.Milliseconds())
		fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", SentinelMaster, sentinelFailoverTimeout.Milliseconds())
		fmt.Fprintf(&b, "sentinel parallel-syncs %s %d\n", SentinelMaster, parallel)
		if password != "" {
			fmt.Fprintf(&b, "sentinel auth-pass %s %s\n", SentinelMaster, confQuote(password))
		}
		if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
			return nil, fmt.Errorf("redistest: write sentinel config %s: %w", conf, err)
		}
		sn := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: dir, args: []string{conf, "--sentinel"}}
		if lastErr = sn.start(bin); lastErr == nil {
			return sn, nil
		}
	}
	return nil, lastErr
}

// confQuote quotes s for a redis configuration file.
func confQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// Close kills every sentinel and data server and waits for them to exit.
func (s *Sentinel) Close() error {
	var errs []error
	for _, p := range append(slices.Clone(s.sentinels), s.servers...) {
		errs = append(errs, p.Kill())
	}
	return errors.Join(errs...)
}

// SentinelAddrs returns the host:port of every sentinel, running or not.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.Addr
	}
	return addrs
}

// FailoverOptions returns go-redis options for a client that finds the
// primary through the sentinels: the master name, every sentinel's address
// and the data servers' password, if they have one.
func (s *Sentinel) FailoverOptions() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: SentinelMaster, SentinelAddrs: s.SentinelAddrs(), Password: s.password}
}

// Client returns a go-redis failover client for s, closed when the test
// ends.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	rdb := redis.NewFailoverClient(s.FailoverOptions())
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Servers returns the data servers, running or not, in the order they were
// first started: the first was the primary then.
func (s *Sentinel) Servers() []*Server { return slices.Clone(s.servers) }

// Sentinels returns the sentinel processes, running or not. A sentinel
// keeps what it learns in its configuration file: one killed and started
// again with Restart learns the current primary from the others within
// about a second.
func (s *Sentinel) Sentinels() []*Server { return slices.Clone(s.sentinels) }

// Primary returns the data server that a majority of all the sentinels name
// as primary now (SENTINEL GET-MASTER-ADDR-BY-NAME). It may be dead, when
// the sentinels have not noticed yet.
func (s *Sentinel) Primary(ctx context.Context) (*Server, error) {
	votes := map[string]int{}
	for _, sn := range live(s.sentinels) {
		addr, err := masterAddr(ctx, sn)
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		votes[addr]++
	}
	for addr, n := range votes {
		if n > len(s.sentinels)/2 {
			return s.server(addr)
		}
	}
	return nil, fmt.Errorf("redistest: no majority of the %d sentinels names one primary: %v", len(s.sentinels), votes)
}

// Replicas returns the live data servers that say they are replicas of the
// primary that Primary returns, whether their link to it is up or not.
func (s *Sentinel) Replicas(ctx context.Context) ([]*Server, error) {
	p, err := s.Primary(ctx)
	if err != nil {
		return nil, err
	}
	var out []*Server
	for _, d := range live(s.servers) {
		if d == p {
			continue
		}
		info, err := replicationInfo(ctx, d)
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		if infoField(info, "role") == "slave" && infoField(info, "master_port") == strconv.Itoa(p.Port) {
			out = append(out, d)
		}
	}
	return out, nil
}

// Failover waits until every live replica has every write the primary had
// when Failover was called, asks a sentinel for SENTINEL FAILOVER, and
// returns the replica promoted once the set-up has settled around it (see
// below). Writes made meanwhile may be lost, as with any SENTINEL FAILOVER,
// which does not stop the old primary: a client goes on writing to the old
// primary after the replica's promotion until it learns of the new one
// (about 1 s here, for a go-redis failover client, which listens for
// +switch-master), and those writes are gone when the old primary becomes a
// replica.
//
// The set-up has settled when every live sentinel names the new primary, it
// says role:master, every other live data server is its replica with its
// link up, and the sentinels see all of them healthy and know each other, as
// after LaunchSentinel. Sentinel would turn the old primary into a replica
// only some 10 s after the failover (it waits 8 s after it sees the
// unexpected role, and asks replicas for INFO every 10 s); the harness sends
// it REPLICAOF as soon as every live sentinel names the new primary.
func (s *Sentinel) Failover(ctx context.Context) (*Server, error) {
	old, err := s.Primary(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.catchUp(ctx, old); err != nil {
		return nil, err
	}
	next := time.Time{}
	return s.waitPromoted(ctx, old, fmt.Sprintf("a replica to take over from %s by SENTINEL FAILOVER", old.Addr), func() error {
		if time.Now().Before(next) {
			return nil
		}
		sns := live(s.sentinels)
		if len(sns) == 0 {
			return errors.New("no live sentinel to ask for a failover")
		}
		// Ask only while the sentinel still names the old primary: once
		// it names another, the failover is done, and asking again would
		// start the next one. Ask the same sentinel each time, so that the
		// one asked is the one failing over, which is the first to know.
		if addr, err := masterAddr(ctx, sns[0]); err != nil || addr != old.Addr {
			return err
		}
		rdb := sentinelClient(sns[0])
		err := rdb.Failover(ctx, SentinelMaster).Err()
		_ = rdb.Close()
		if err != nil {
			// Such as NOGOODSLAVE while a replica is still syncing, or
			// INPROG: ask again soon.
			next = time.Now().Add(200 * time.Millisecond)
			return fmt.Errorf("SENTINEL FAILOVER %s on %s: %w", SentinelMaster, sns[0].Addr, err)
		}
		// A failover the sentinel gives up on (after the failover
		// timeout) is not tried again by itself: ask again then.
		next = time.Now().Add(sentinelFailoverTimeout + time.Second)
		return nil
	})
}

// KillPrimary waits until every live replica has every write the primary had
// when KillPrimary was called, kills the primary with SIGKILL, and returns it
// and the replica the sentinels promote once the set-up has settled around
// the new primary as in Failover. The sentinels notice after 1 s; a failover
// takes a few seconds more. The old primary stays dead: Rejoin brings it
// back.
func (s *Sentinel) KillPrimary(ctx context.Context) (old, promoted *Server, err error) {
	old, err = s.electable(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := s.catchUp(ctx, old); err != nil {
		return nil, nil, err
	}
	if err := old.Kill(); err != nil {
		return nil, nil, fmt.Errorf("redistest: kill primary %s: %w", old.Addr, err)
	}
	promoted, err = s.waitPromoted(ctx, old, fmt.Sprintf("the sentinels to promote a replica in place of the killed %s", old.Addr), nil)
	return old, promoted, err
}

// Rejoin starts the killed data server srv again, empty (there is no
// persistence), on the same port and as a replica of the primary, and
// returns once it has synced with it and the set-up has settled as after
// LaunchSentinel. The harness makes srv a replica itself rather than wait
// for the sentinels, which would turn a returning old primary into a
// replica only some 10 s later.
//
// Rejoin first waits for the set-up to settle without srv (see Failover),
// and takes the primary it settled around: srv must not come back while the
// sentinels are still failing over, or have just done so. In the second
// after a failover a sentinel may find the new primary down and fail over
// again at once, to any healthy replica, such as srv, just back and empty
// (see settled). Several killed servers may be rejoined in any order.
func (s *Sentinel) Rejoin(ctx context.Context, srv *Server) error {
	if !slices.Contains(s.servers, srv) {
		return fmt.Errorf("redistest: %s is not a data server of this sentinel set-up", srv.Addr)
	}
	if srv.PID() != 0 {
		return fmt.Errorf("redistest: %s is still running; kill it before Rejoin", srv.Addr)
	}
	var p *Server
	err := poll(ctx, fmt.Sprintf("the set-up to settle before %s rejoins", srv.Addr), func() error {
		got, err := s.settled(ctx)
		p = got
		return err
	})
	if err != nil {
		return err
	}
	if err := restartEmpty(srv, p); err != nil {
		return err
	}
	return poll(ctx, fmt.Sprintf("%s to rejoin as a replica of %s", srv.Addr, p.Addr), func() error {
		got, err := s.settled(ctx)
		if err == nil && got != p {
			err = fmt.Errorf("the sentinels name %s as primary, not %s", got.Addr, p.Addr)
		}
		return err
	})
}

// Lag makes replicas miss every write made to the primary from now on, until
// resume is called; with no replicas given, it lags every live replica of
// the primary. For each replica it waits until the replica has every write
// the primary has, stops it with SIGSTOP, and then closes its replication
// connection on the primary (CLIENT KILL ADDR), so that writes the primary
// had not sent yet are never sent on it, nor delivered at SIGCONT. The
// primary then no longer lists the replica, and WAIT on the primary does not
// count it.
//
// resume continues the replicas with SIGCONT and waits until the set-up has
// settled again as after LaunchSentinel: each replica has reconnected to the
// primary, catching up on the missed writes from its backlog (or by a full
// resync), and the sentinels see it healthy. It does not take a context; its
// wait is bounded by poll's limit.
//
// How long replicas may stay lagged: a lagged replica answers nobody,
// sentinels included, so 1 s (down-after-milliseconds) after it stops the
// sentinels mark it subjectively down, and they do not promote a replica
// that is down. A lag shorter than 1 s leaves the replica electable
// throughout; a longer one makes it unelectable until about a second after
// resume (resume waits for that). So while every replica is lagged for more
// than 1 s, a failed primary is not replaced until they are resumed. The lag
// itself does not count against a replica once it is resumed: it notices
// its lost link only then, so the sentinels' limit on how long a promoted
// replica's link may have been down does not bite (a replica lagged 12 s
// was promoted as fast as one lagged for milliseconds). Writes made during
// the lag beyond the primary's replication backlog (repl-backlog-size, 1 MB
// by default) make the resumed replica resync in full instead of catching
// up.
func (s *Sentinel) Lag(ctx context.Context, replicas ...*Server) (resume func() error, err error) {
	p, err := s.Primary(ctx)
	if err != nil {
		return nil, err
	}
	if len(replicas) == 0 {
		if replicas, err = s.Replicas(ctx); err != nil {
			return nil, err
		}
		if len(replicas) == 0 {
			return nil, fmt.Errorf("redistest: the primary %s has no live replica to lag", p.Addr)
		}
	}
	if err := s.lag(ctx, p, replicas); err != nil {
		return nil, err
	}
	return func() error {
		if err := resumeAll(replicas); err != nil {
			return err
		}
		return poll(context.Background(), "the resumed replicas to catch up", func() error {
			_, err := s.settled(context.Background())
			return err
		})
	}, nil
}

// LossyFailover fails the primary over to a replica that lacks the writes of
// write, which the caller makes through any client: it lags every live
// replica as Lag does, runs write against the primary, kills the primary
// with SIGKILL, continues the replicas with SIGCONT and returns the old
// primary and the replica promoted once the set-up has settled as in
// KillPrimary. Whatever write wrote is gone; every write before
// LossyFailover was called is kept. The old primary stays dead: Rejoin
// brings it back.
//
// write may take its time: the replicas are electable again about a second
// after they are resumed, however long they were lagged (see Lag). If write
// fails, the replicas are continued and the primary is left running, with
// the replicas catching up by themselves.
func (s *Sentinel) LossyFailover(ctx context.Context, write func() error) (old, promoted *Server, err error) {
	old, err = s.electable(ctx)
	if err != nil {
		return nil, nil, err
	}
	replicas, err := s.Replicas(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := s.lag(ctx, old, replicas); err != nil {
		return nil, nil, err
	}
	if err := write(); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("redistest: write during lossy failover of %s: %w", old.Addr, err), resumeAll(replicas))
	}
	killErr := old.Kill()
	if err := errors.Join(resumeAll(replicas), killErr); err != nil {
		return nil, nil, fmt.Errorf("redistest: kill primary %s and resume its replicas: %w", old.Addr, err)
	}
	promoted, err = s.waitPromoted(ctx, old, fmt.Sprintf("the sentinels to promote a lagged replica in place of the killed %s", old.Addr), nil)
	return old, promoted, err
}

// LossyFailoverTo fails the primary over to the replica to, which lacks the
// writes of write, while the other replicas have them: it lags only to (as
// Lag does), runs write against the primary (a client's WAIT there may be
// acknowledged by the other replicas), waits until every other live replica
// has every write the primary has then, kills the primary and every other
// data server with SIGKILL, continues to with SIGCONT, and returns once the
// sentinels have promoted to and the set-up has settled around it as in
// Failover. It returns the killed servers, the old primary first, which stay
// dead until Rejoin; they may be rejoined in any order. Whatever write
// wrote is gone, with every server that had it; every write before
// LossyFailoverTo was called is kept.
//
// LossyFailoverTo first waits for the set-up to settle as after
// LaunchSentinel; to must then be a live replica of the primary. If write
// fails, or another replica does not catch up, to is continued and nothing
// is killed. If the failover fails, the servers killed are returned with
// the error.
//
// It takes about 3.5 s: the sentinels find the primary down after 1 s,
// promote to within about a second, and reconnect to it within about one
// more (see settled). A sentinel may find to down just before it
// reconnects, in about 2 failovers of 5 here, and start another failover,
// which finds no replica to promote and gives up; the sentinels then start
// no failover by themselves for 6 s (twice the failover timeout). So if 2 s
// after the kill no sentinel has started one, LossyFailoverTo asks one for
// SENTINEL FAILOVER, which the delay does not hold back. KillPrimary and
// LossyFailover do not ask: right after LossyFailoverTo they may take up
// to 6 s longer.
func (s *Sentinel) LossyFailoverTo(ctx context.Context, to *Server, write func() error) (killed []*Server, err error) {
	if !slices.Contains(s.servers, to) {
		return nil, fmt.Errorf("redistest: %s is not a data server of this sentinel set-up", to.Addr)
	}
	var old *Server
	err = poll(ctx, fmt.Sprintf("the set-up to settle before a lossy failover to %s", to.Addr), func() error {
		p, err := s.settled(ctx)
		old = p
		return err
	})
	if err != nil {
		return nil, err
	}
	if old == to {
		return nil, fmt.Errorf("redistest: %s is the primary already, not a replica to fail over to", to.Addr)
	}
	if !to.answers() {
		return nil, fmt.Errorf("redistest: %s is not live; it cannot be failed over to", to.Addr)
	}
	others, err := s.Replicas(ctx)
	if err != nil {
		return nil, err
	}
	others = slices.DeleteFunc(others, func(r *Server) bool { return r == to })
	if err := s.lag(ctx, old, []*Server{to}); err != nil {
		return nil, err
	}
	if err := write(); err != nil {
		return nil, errors.Join(fmt.Errorf("redistest: write during lossy failover of %s to %s: %w", old.Addr, to.Addr, err), resumeAll([]*Server{to}))
	}
	for _, r := range others {
		if err := waitCaughtUp(ctx, old, r); err != nil {
			return nil, errors.Join(err, resumeAll([]*Server{to}))
		}
	}
	doomed := []*Server{old}
	for _, d := range s.servers {
		if d != old && d != to && d.PID() != 0 {
			doomed = append(doomed, d)
		}
	}
	var errs []error
	for _, d := range doomed {
		if err := d.Kill(); err != nil {
			errs = append(errs, fmt.Errorf("redistest: kill %s: %w", d.Addr, err))
			continue
		}
		killed = append(killed, d)
	}
	if err := errors.Join(append(errs, resumeAll([]*Server{to}))...); err != nil {
		return killed, err
	}
	due := time.Now().Add(2 * sentinelDownAfter)
	err = poll(ctx, fmt.Sprintf("the sentinels to promote %s in place of the killed %s", to.Addr, old.Addr), func() error {
		nudged := s.nudgeFailover(ctx, old, &due)
		p, err := s.settled(ctx)
		if err == nil && p != to {
			err = fmt.Errorf("the sentinels name %s", p.Addr)
		}
		if err != nil {
			return errors.Join(err, nudged)
		}
		return nil
	})
	return killed, err
}

// nudgeFailover asks a sentinel for SENTINEL FAILOVER away from the dead
// primary old, once *due has passed, if the sentinels hold back: every live
// sentinel still names old and none has a failover under way. A failover
// the sentinels start by themselves is under way about 1.3 s after the
// primary dies; they hold back for twice the failover timeout after one
// of them tried a failover and gave up, or voted in such a try. It then
// sets *due to ask again, if need be, after the failover timeout, or soon
// if the sentinel refused. It returns an error to report with the reason
// to go on waiting.
func (s *Sentinel) nudgeFailover(ctx context.Context, old *Server, due *time.Time) error {
	if time.Now().Before(*due) {
		return nil
	}
	sns := live(s.sentinels)
	if len(sns) == 0 {
		return errors.New("no live sentinel to ask for a failover")
	}
	for _, sn := range sns {
		rdb := sentinelClient(sn)
		master, err := rdb.Master(ctx, SentinelMaster).Result()
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("SENTINEL MASTER %s on %s: %w", SentinelMaster, sn.Addr, err)
		}
		if net.JoinHostPort(master["ip"], master["port"]) != old.Addr || strings.Contains(master["flags"], "failover_in_progress") {
			return nil
		}
	}
	rdb := sentinelClient(sns[0])
	err := rdb.Failover(ctx, SentinelMaster).Err()
	_ = rdb.Close()
	if err != nil {
		*due = time.Now().Add(200 * time.Millisecond)
		return fmt.Errorf("SENTINEL FAILOVER %s on %s: %w", SentinelMaster, sns[0].Addr, err)
	}
	*due = time.Now().Add(sentinelFailoverTimeout + time.Second)
	return nil
}

// RestartPrimaryEmpty kills the primary with SIGKILL and at once starts it
// again, empty, on the same port, well within the 1 s after which the
// sentinels would find it down, so that it stays the primary with no keys.
// Its replicas reconnect, find a new replication history and resync to
// empty, as after a real restart without persistence. It returns the
// primary once the set-up has settled around it as after LaunchSentinel.
func (s *Sentinel) RestartPrimaryEmpty(ctx context.Context) (*Server, error) {
	p, err := s.Primary(ctx)
	if err != nil {
		return nil, err
	}
	if !p.answers() {
		return nil, fmt.Errorf("redistest: the primary %s is not live", p.Addr)
	}
	if err := restartEmpty(p, nil); err != nil {
		return nil, err
	}
	err = poll(ctx, fmt.Sprintf("the restarted primary %s and its replicas to settle", p.Addr), func() error {
		got, err := s.settled(ctx)
		if err == nil && got != p {
			err = fmt.Errorf("the sentinels failed over to %s", got.Addr)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// electable returns the primary if it has a live replica to promote.
func (s *Sentinel) electable(ctx context.Context) (*Server, error) {
	p, err := s.Primary(ctx)
	if err != nil {
		return nil, err
	}
	rs, err := s.Replicas(ctx)
	if err != nil {
		return nil, err
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("redistest: the primary %s has no live replica to promote", p.Addr)
	}
	return p, nil
}

// catchUp waits until every live replica of p has every write p has now.
func (s *Sentinel) catchUp(ctx context.Context, p *Server) error {
	rs, err := s.Replicas(ctx)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if err := waitCaughtUp(ctx, p, r); err != nil {
			return err
		}
	}
	return nil
}

// waitPromoted waits until the set-up has settled around a primary other
// than old, and returns it. Before each look it calls nudge, unless nil; an
// error from nudge is reported with the reason to go on waiting.
func (s *Sentinel) waitPromoted(ctx context.Context, old *Server, what string, nudge func() error) (*Server, error) {
	var promoted *Server
	err := poll(ctx, what, func() error {
		var nudged error
		if nudge != nil {
			nudged = nudge()
		}
		p, err := s.settled(ctx)
		if err != nil {
			return errors.Join(err, nudged)
		}
		if p == old {
			return fmt.Errorf("the sentinels still name %s", old.Addr)
		}
		promoted = p
		return nil
	})
	if err != nil {
		return nil, err
	}
	return promoted, nil
}

// settled checks once that the set-up is ready for a failover, and returns
// its primary p:
//   - every live sentinel names p, a data server of ours, and sees it as a
//     master with no failover under way, connected, and answering: it has
//     had a reply to its last ping (see sentinelPrimary);
//   - p is live and says role:master;
//   - every other live data server says it is a replica of p, with its link
//     up and p's replication id, and p lists it as an online replica;
//   - every live sentinel lists every other live data server among p's
//     replicas, neither down nor disconnected, and knows every other live
//     sentinel, not down.
//
// Once the first two hold, a live data server that is not p's replica is
// sent REPLICAOF p, as the sentinels would do some 10 s later. Not before:
// while a failover is under way, the replica being promoted says
// role:master too.
func (s *Sentinel) settled(ctx context.Context) (*Server, error) {
	sns := live(s.sentinels)
	if len(sns) == 0 {
		return nil, errors.New("no live sentinel")
	}
	var p *Server
	for _, sn := range sns {
		got, err := sentinelPrimary(ctx, sn)
		if err != nil {
			return nil, err
		}
		d, err := s.server(got)
		if err != nil {
			return nil, err
		}
		if p != nil && d != p {
			return nil, fmt.Errorf("sentinels disagree: %s and %s", p.Addr, d.Addr)
		}
		p = d
	}
	if !p.answers() {
		return nil, fmt.Errorf("the sentinels name %s, which is not live", p.Addr)
	}
	pinfo, err := replicationInfo(ctx, p)
	if err != nil {
		return nil, err
	}
	if role := infoField(pinfo, "role"); role != "master" {
		return nil, fmt.Errorf("%s, named by the sentinels, says role %s", p.Addr, role)
	}
	online := onlineReplicas(pinfo)
	var replicas []*Server
	for _, d := range live(s.servers) {
		if d == p {
			continue
		}
		info, err := replicationInfo(ctx, d)
		if err != nil {
			return nil, err
		}
		if infoField(info, "role") != "slave" || infoField(info, "master_port") != strconv.Itoa(p.Port) {
			rdb := nodeClient(d)
			err := rdb.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(p.Port)).Err()
			_ = rdb.Close()
			if err != nil {
				return nil, fmt.Errorf("REPLICAOF %s on %s: %w", p.Addr, d.Addr, err)
			}
			return nil, fmt.Errorf("%s was not a replica of %s; sent REPLICAOF", d.Addr, p.Addr)
		}
		switch {
		case infoField(info, "master_link_status") != "up":
			return nil, fmt.Errorf("replica %s: link to %s is not up", d.Addr, p.Addr)
		case infoField(info, "master_replid") != infoField(pinfo, "master_replid"):
			return nil, fmt.Errorf("replica %s has not synced with %s's replication history yet", d.Addr, p.Addr)
		case !online[d.Port]:
			return nil, fmt.Errorf("%s does not list %s as an online replica", p.Addr, d.Addr)
		}
		replicas = append(replicas, d)
	}
	for _, sn := range sns {
		if err := sentinelKnows(ctx, sn, sns, replicas); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// sentinelPrimary returns the address of the primary that sentinel sn names,
// once sn sees it as a master with no failover under way, not down, with
// its link connected and no ping unanswered (last-ping-sent 0).
//
// The last is what makes a failover safe to build on. When a sentinel
// switches to a new primary it counts the primary's silence from the
// switch, but connects to it only a second after its last attempt at the
// old, dead primary, so often some 900 ms later. With down-after-milliseconds
// 1000 it may find the new primary subjectively down right then, before
// the reply to its first ping; the other sentinels' answers that the old
// primary was down count for 5 s, so it is objectively down at once, and
// the switch cleared the delay between failovers: the sentinel fails over
// again at once, to any healthy replica. Once sn has had that reply, the
// window is closed. A ping is unanswered at other times only for the
// moment it is under way.
func sentinelPrimary(ctx context.Context, sn *Server) (string, error) {
	addr, err := masterAddr(ctx, sn)
	if err != nil {
		return "", err
	}
	rdb := sentinelClient(sn)
	defer rdb.Close()
	master, err := rdb.Master(ctx, SentinelMaster).Result()
	if err != nil {
		return "", fmt.Errorf("SENTINEL MASTER %s on %s: %w", SentinelMaster, sn.Addr, err)
	}
	if net.JoinHostPort(master["ip"], master["port"]) != addr || master["flags"] != "master" {
		return "", fmt.Errorf("sentinel %s sees %s:%s with flags %s", sn.Addr, master["ip"], master["port"], master["flags"])
	}
	if sent := master["last-ping-sent"]; sent != "0" {
		return "", fmt.Errorf("sentinel %s has had no reply from %s to a ping sent %s ms ago", sn.Addr, addr, sent)
	}
	return addr, nil
}

// sentinelKnows checks that sentinel sn lists replicas among its primary's
// replicas and every sentinel of sns but itself among its peers, all neither
// down nor disconnected.
func sentinelKnows(ctx context.Context, sn *Server, sns []*Server, replicas []*Server) error {
	rdb := sentinelClient(sn)
	defer rdb.Close()
	known, err := rdb.Replicas(ctx, SentinelMaster).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL REPLICAS %s on %s: %w", SentinelMaster, sn.Addr, err)
	}
	if err := healthy(known, replicas); err != nil {
		return fmt.Errorf("sentinel %s: %w", sn.Addr, err)
	}
	peers, err := rdb.Sentinels(ctx, SentinelMaster).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL SENTINELS %s on %s: %w", SentinelMaster, sn.Addr, err)
	}
	others := slices.DeleteFunc(slices.Clone(sns), func(o *Server) bool { return o == sn })
	if err := healthy(peers, others); err != nil {
		return fmt.Errorf("sentinel %s: %w", sn.Addr, err)
	}
	return nil
}

// healthy checks that a SENTINEL REPLICAS or SENTINEL SENTINELS reply lists
// each of want, neither down nor disconnected.
func healthy(listed []map[string]string, want []*Server) error {
	byPort := map[string]map[string]string{}
	for _, e := range listed {
		byPort[e["port"]] = e
	}
	for _, w := range want {
		e, ok := byPort[strconv.Itoa(w.Port)]
		if !ok {
			return fmt.Errorf("does not know %s yet", w.Addr)
		}
		for _, f := range strings.Split(e["flags"], ",") {
			if f == "s_down" || f == "o_down" || f == "disconnected" {
				return fmt.Errorf("sees %s as %s", w.Addr, e["flags"])
			}
		}
	}
	return nil
}

// server returns the data server at host:port addr.
func (s *Sentinel) server(addr string) (*Server, error) {
	for _, d := range s.servers {
		if d.Addr == addr {
			return d, nil
		}
	}
	return nil, fmt.Errorf("redistest: the sentinels name %s, which is none of the data servers", addr)
}

// lag lags replicas of p as Lag describes. If it fails, it resumes those it
// stopped.
func (s *Sentinel) lag(ctx context.Context, p *Server, replicas []*Server) (err error) {
	for _, r := range replicas {
		if !slices.Contains(s.servers, r) {
			return fmt.Errorf("redistest: %s is not a data server of this sentinel set-up", r.Addr)
		}
		info, err := replicationInfo(ctx, r)
		if err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
		if infoField(info, "role") != "slave" || infoField(info, "master_port") != strconv.Itoa(p.Port) {
			return fmt.Errorf("redistest: %s is not a replica of the primary %s", r.Addr, p.Addr)
		}
		if err := waitCaughtUp(ctx, p, r); err != nil {
			return err
		}
	}
	var paused []*Server
	defer func() {
		if err != nil {
			err = errors.Join(err, resumeAll(paused))
		}
	}()
	prdb := nodeClient(p)
	defer prdb.Close()
	for _, r := range replicas {
		err := poll(ctx, fmt.Sprintf("replica %s to be stopped and cut off from %s", r.Addr, p.Addr), func() error {
			laddr, err := replicationLocalAddr(ctx, r)
			if err != nil {
				return err
			}
			if err := r.Pause(); err != nil {
				return fmt.Errorf("pause replica %s: %w", r.Addr, err)
			}
			n, err := prdb.ClientKillByFilter(ctx, "ADDR", laddr).Result()
			if err == nil && n == 1 {
				return nil
			}
			// The replica reconnected before it stopped: try again.
			if rerr := r.Resume(); rerr != nil {
				return errors.Join(err, rerr)
			}
			return fmt.Errorf("CLIENT KILL ADDR %s on %s: %d killed, %v", laddr, p.Addr, n, err)
		})
		if err != nil {
			return err
		}
		paused = append(paused, r)
	}
	return poll(ctx, fmt.Sprintf("%s to drop its lagged replicas", p.Addr), func() error {
		info, err := replicationInfo(ctx, p)
		if err != nil {
			return err
		}
		online := onlineReplicas(info)
		for _, r := range replicas {
			if _, ok := online[r.Port]; ok {
				return fmt.Errorf("%s still lists %s", p.Addr, r.Addr)
			}
		}
		return nil
	})
}

// replicationLocalAddr returns the local address of replica r's connection
// to its primary, which is the address the primary sees it at.
func replicationLocalAddr(ctx context.Context, r *Server) (string, error) {
	rdb := nodeClient(r)
	defer rdb.Close()
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		return "", fmt.Errorf("CLIENT LIST on %s: %w", r.Addr, err)
	}
	for line := range strings.Lines(list) {
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		if strings.Contains(fields["flags"], "M") && fields["laddr"] != "" {
			return fields["laddr"], nil
		}
	}
	return "", fmt.Errorf("replica %s has no connection to its primary", r.Addr)
}

// resumeAll continues every server of ss with SIGCONT.
func resumeAll(ss []*Server) error {
	var errs []error
	for _, r := range ss {
		if err := r.Resume(); err != nil {
			errs = append(errs, fmt.Errorf("redistest: resume %s: %w", r.Addr, err))
		}
	}
	return errors.Join(errs...)
}

// restartEmpty kills srv if it runs and starts it again, empty, on the same
// port: as a replica of primary, or, if primary is nil, as a primary.
//
// The data servers share a directory, where a replica that syncs in full
// leaves the RDB file it received, and a server loads its RDB file when it
// starts: with a file shared by all (dump.rdb by default) it would come
// back with another server's keys and replication history, and with its
// own, with its old keys. So srv gets an RDB file name of its own, as
// LaunchSentinel gives it, and the file is removed before it starts.
func restartEmpty(srv, primary *Server) error {
	file := fmt.Sprintf("dump-%d.rdb", srv.Port)
	srv.mu.Lock()
	var args []string
	for i := 0; i < len(srv.args); i++ {
		switch srv.args[i] {
		case "--replicaof":
			i += 2 // its host and port
			continue
		case "--dbfilename":
			i++
			continue
		}
		args = append(args, srv.args[i])
	}
	args = append(args, "--dbfilename", file)
	if primary != nil {
		args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	}
	srv.args = args
	srv.mu.Unlock()
	if err := srv.Kill(); err != nil {
		return fmt.Errorf("redistest: kill %s: %w", srv.Addr, err)
	}
	if err := os.Remove(filepath.Join(srv.dir, file)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("redistest: remove the RDB file of %s: %w", srv.Addr, err)
	}
	if err := srv.Restart(); err != nil {
		return fmt.Errorf("redistest: restart %s empty: %w", srv.Addr, err)
	}
	return nil
}

// waitLinked waits until replica r has its link to primary up and primary
// lists it as an online replica.
func waitLinked(ctx context.Context, r, primary *Server) error {
	return poll(ctx, fmt.Sprintf("replica %s to sync with %s", r.Addr, primary.Addr), func() error {
		info, err := replicationInfo(ctx, r)
		if err != nil {
			return err
		}
		if infoField(info, "master_link_status") != "up" {
			return errors.New("link is not up")
		}
		pinfo, err := replicationInfo(ctx, primary)
		if err != nil {
			return err
		}
		if !onlineReplicas(pinfo)[r.Port] {
			return fmt.Errorf("%s does not list it as online", primary.Addr)
		}
		return nil
	})
}

// replicationInfo returns s's INFO replication.
func replicationInfo(ctx context.Context, s *Server) (string, error) {
	rdb := nodeClient(s)
	defer rdb.Close()
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return "", fmt.Errorf("INFO replication on %s: %w", s.Addr, err)
	}
	return info, nil
}

// onlineReplicas returns, by port, the replicas that an INFO replication
// reply of a primary lists: true for those whose state is online.
func onlineReplicas(info string) map[int]bool {
	out := map[int]bool{}
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if !strings.HasPrefix(k, "slave") || strings.Contains(k, "_") {
			continue
		}
		fields := map[string]string{}
		for _, f := range strings.Split(v, ",") {
			fk, fv, _ := strings.Cut(f, "=")
			fields[fk] = fv
		}
		if port, err := strconv.Atoi(fields["port"]); err == nil {
			out[port] = fields["state"] == "online"
		}
	}
	return out
}

// masterAddr asks sentinel sn for the address of SentinelMaster.
func masterAddr(ctx context.Context, sn *Server) (string, error) {
	rdb := sentinelClient(sn)
	defer rdb.Close()
	hp, err := rdb.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s on %s: %w", SentinelMaster, sn.Addr, err)
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("SENTINEL GET-MASTER-ADDR-BY-NAME %s on %s: %v", SentinelMaster, sn.Addr, hp)
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// sentinelClient returns a client for sentinel sn, for the harness's own
// commands, with the settings of nodeClient.
func sentinelClient(sn *Server) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{
		Addr:       sn.Addr,
		MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second,
	})
}

// live returns the servers of ss that run and are not paused.
func live(ss []*Server) []*Server {
	var out []*Server
	for _, s := range ss {
		if s.answers() {
			out = append(out, s)
		}
	}
	return out
}

// stablePort returns a port in 12000–22000 that is free on loopback now and
// was never given to a server of this process (claim). It is below the
// ephemeral range, so no outgoing connection takes it while a server killed
// on it is down.
func stablePort() (int, error) {
	for range 200 {
		if port := 12000 + rand.IntN(10000); portFree(port) && claim(port) {
			return port, nil
		}
	}
	return 0, errors.New("redistest: found no free port in 12000–22000")
}
