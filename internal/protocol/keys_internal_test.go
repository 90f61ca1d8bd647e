package protocol

import (
	"slices"
	"testing"
)

// TestNewKeys: the names newKeys slices out of one string are the lock's tag
// followed by each key's suffix, for every kind, also for names that need
// escaping, and appending to a key list never writes into another.
func TestNewKeys(t *testing.T) {
	for _, k := range []*Layout{MutexKind, FairKind, SemKind, RWReadKind, RWWriteKind, LatchKind} {
		for _, name := range []string{"x", "{a}b%", ""} {
			ks := NewKeys("p:", k, name)
			tag := "p:" + k.Space + "{" + NameEscaper.Replace(name) + "}"
			if ks.Tag != tag || ks.Channel != tag+":wake" || ks.channelArg != any(tag+":wake") {
				t.Errorf("%s %q: tag %q, channel %q", k.Name, name, ks.Tag, ks.Channel)
			}
			for _, l := range []struct {
				got, names []string
			}{{ks.AcquireKeys, k.acquireKeys}, {ks.releaseKeys, k.releaseKeys}, {ks.leaseKeys, k.leaseKeys}} {
				want := make([]string, len(l.names))
				for i, n := range l.names {
					want[i] = tag + keyNames[n]
				}
				if !slices.Equal(l.got, want) {
					t.Errorf("%s %q: keys %q, want %q", k.Name, name, l.got, want)
				}
			}
			acq := slices.Clone(ks.AcquireKeys)
			_ = append(ks.AcquireKeys, "extra")
			_ = append(ks.releaseKeys, "extra")
			if !slices.Equal(ks.AcquireKeys, acq) || (len(ks.releaseKeys) > 0 && ks.releaseKeys[0] != tag) {
				t.Errorf("%s %q: an append wrote into another key list", k.Name, name)
			}
		}
	}
}
