package dlock

import (
	"slices"
	"testing"
)

// TestNewKeys: the names newKeys slices out of one string are the lock's tag
// followed by each key's suffix, for every kind, also for names that need
// escaping, and appending to a key list never writes into another.
func TestNewKeys(t *testing.T) {
	for _, k := range []*kind{mutexKind, fairKind, semKind, rwReadKind, rwWriteKind, latchKind} {
		for _, name := range []string{"x", "{a}b%", ""} {
			ks := newKeys("p:", k, name)
			tag := "p:" + k.space + "{" + nameEscaper.Replace(name) + "}"
			if ks.tag != tag || ks.channel != tag+":wake" || ks.channelArg != any(tag+":wake") {
				t.Errorf("%s %q: tag %q, channel %q", k.name, name, ks.tag, ks.channel)
			}
			for _, l := range []struct {
				got, names []string
			}{{ks.acquireKeys, k.acquireKeys}, {ks.releaseKeys, k.releaseKeys}, {ks.leaseKeys, k.leaseKeys}} {
				want := make([]string, len(l.names))
				for i, n := range l.names {
					want[i] = tag + keyNames[n]
				}
				if !slices.Equal(l.got, want) {
					t.Errorf("%s %q: keys %q, want %q", k.name, name, l.got, want)
				}
			}
			acq := slices.Clone(ks.acquireKeys)
			_ = append(ks.acquireKeys, "extra")
			_ = withMarker(ks.releaseKeys, ks, "o")
			if !slices.Equal(ks.acquireKeys, acq) || (len(ks.releaseKeys) > 0 && ks.releaseKeys[0] != tag) {
				t.Errorf("%s %q: an append wrote into another key list", k.name, name)
			}
		}
	}
}
