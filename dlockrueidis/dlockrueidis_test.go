package dlockrueidis_test

import (
	"crypto/tls"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/dlock-go/dlock/internal/promises"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

// A Cluster client of rueidis leaves a goroutine behind its Close for up to
// five seconds: the pause after a refresh of its slot map.
func TestMain(m *testing.M) {
	redistest.Main(m, 0, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
}

// TestPromises runs the promise-level suite on rueidis.
func TestPromises(t *testing.T) {
	t.Parallel() // a server of its own
	promises.Run(t, dial)
}

// dial is a Client on rueidis connected to addr, closed when t ends.
func dial(t *testing.T, addr, password string, opts ...dlock.Option) *dlock.Client {
	return clientOf(t, rueidis.ClientOption{InitAddress: []string{addr}, Password: password}, opts...)
}

// clientOf is a Client on a rueidis client made with o (its cache off),
// the rueidis client closed when t ends.
func clientOf(t *testing.T, o rueidis.ClientOption, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	o.DisableCache = true
	rc, err := rueidis.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	c, err := dlockrueidis.New(rc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNilClient: a nil client is an error, not a panic.
func TestNilClient(t *testing.T) {
	if _, err := dlockrueidis.New(nil); err == nil {
		t.Fatal("New(nil): nil error")
	}
	if _, err := dlockrueidis.NewRedLock([]rueidis.Client{nil, nil, nil}); err == nil {
		t.Fatal("NewRedLock of nil nodes: nil error")
	}
}

// TestPromisesCluster runs the Cluster's promises on rueidis.
func TestPromisesCluster(t *testing.T) {
	t.Parallel() // servers of their own
	promises.RunCluster(t, func(t *testing.T, addrs []string, opts ...dlock.Option) *dlock.Client {
		return clientOf(t, rueidis.ClientOption{InitAddress: addrs}, opts...)
	})
}

// TestPromisesTLS runs the TLS promises on rueidis.
func TestPromisesTLS(t *testing.T) {
	t.Parallel() // servers of their own
	promises.RunTLS(t, func(t *testing.T, addr string, cfg *tls.Config, opts ...dlock.Option) *dlock.Client {
		return clientOf(t, rueidis.ClientOption{InitAddress: []string{addr}, TLSConfig: cfg}, opts...)
	})
}

// TestPromisesSentinel runs the Sentinel promises on rueidis.
func TestPromisesSentinel(t *testing.T) {
	t.Parallel() // servers of their own
	promises.RunSentinel(t, func(t *testing.T, addrs []string, master string, opts ...dlock.Option) *dlock.Client {
		return clientOf(t, rueidis.ClientOption{InitAddress: addrs, Sentinel: rueidis.SentinelOption{MasterSet: master}}, opts...)
	})
}

// TestPromisesWithoutScripts runs the promises of WithoutScripts on rueidis
// (Valkey 9.0 or later; it skips elsewhere).
func TestPromisesWithoutScripts(t *testing.T) {
	t.Parallel() // a server of its own
	promises.RunWithoutScripts(t, dial)
}
