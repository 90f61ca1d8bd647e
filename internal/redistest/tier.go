package redistest

import "testing"

// The fast tier (go test -short) runs on one plain redis-server binary and
// nothing else, in a couple of minutes: what needs a Cluster, a Sentinel
// set-up, several servers (a RedLock's nodes), worker processes or long
// waits is the full tier's (go test without -short), which CI runs on Redis
// and Valkey.

// Full skips t in the fast tier, saying why: what makes it a full-tier test
// (a Cluster, failovers, seconds of TTLs). It is the one switch between
// the tiers; a test that calls it runs in full, unchanged, without -short.
func Full(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("full tier (without -short): " + why)
	}
}
