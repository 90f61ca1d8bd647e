package protocol

// A lock's names in Redis: its keys, all in one Cluster slot, and its
// wake-up channel stem.

import (
	"slices"
	"strings"
)

// Keys names everything in Redis that belongs to one lock. Every name carries
// the same {hash tag}, so they share a Redis Cluster slot and one script can
// touch them all; docs/failure-model.md lists them.
type Keys struct {
	Kind    *Layout
	Name    string // as the caller gave it
	Tag     string // prefix, namespace and {hash tag}: the stem of every key and channel
	Channel string // the stem of the wake-up channels; a Client listens on channel + ":" + its id, or on the stem where a release wakes every waiter (Traits.WakeAll)
	// channelArg is channel as a script argument, boxed once.
	channelArg                          any
	AcquireKeys, releaseKeys, leaseKeys []string
}

// NewKeys names the keys of kind k's lock called name, and its wake-up
// channel stem. Every key and the stem are slices of one string, and the key
// lists share one array, so that a lock's names cost a few allocations, not
// one each.
func NewKeys(prefix string, k *Layout, name string) Keys {
	esc := NameEscaper.Replace(name)
	lists := [...][]string{k.acquireKeys, k.releaseKeys, k.leaseKeys}
	var names [8]string // each key's name once, in order of appearance
	n := 0
	for _, list := range lists {
		for _, kn := range list {
			if !slices.Contains(names[:n], kn) {
				names[n] = kn
				n++
			}
		}
	}
	stem := len(prefix) + len(k.Space) + len(esc) + 2
	size := stem + len(":wake") // the tag is the start of every name
	for _, kn := range names[:n] {
		size += stem + len(keyNames[kn])
	}
	var b strings.Builder
	b.Grow(size)
	var at [len(names) + 1][2]int // where each name and the channel stem are in b
	put := func(i int, suffix string) {
		at[i][0] = b.Len()
		b.WriteString(prefix)
		b.WriteString(k.Space)
		b.WriteByte('{')
		b.WriteString(esc)
		b.WriteByte('}')
		b.WriteString(suffix)
		at[i][1] = b.Len()
	}
	for i, kn := range names[:n] {
		put(i, keyNames[kn])
	}
	put(len(names), ":wake")
	all := b.String()
	cut := func(i int) string { return all[at[i][0]:at[i][1]] }
	ks := Keys{Kind: k, Name: name, Tag: all[:stem], Channel: cut(len(names))}
	ks.channelArg = ks.Channel
	// A list that begins another one is a slice of it (a Mutex's acquire
	// and lease lists begin its release list): the longest are built first.
	order := [len(lists)]int{0, 1, 2}
	for i := 1; i < len(order); i++ { // a stable insertion sort, longest first
		for j := i; j > 0 && len(lists[order[j]]) > len(lists[order[j-1]]); j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	var from [len(lists)]int // the list each one is a slice of
	listed := 0
	for oi, i := range order {
		l := lists[i]
		from[i] = i
		for _, j := range order[:oi] {
			if from[j] == j && slices.Equal(l, lists[j][:len(l)]) {
				from[i] = j
				break
			}
		}
		if from[i] == i {
			listed += len(l)
		}
	}
	arr := make([]string, 0, listed)
	var built [len(lists)][]string
	for _, i := range order {
		l := lists[i]
		if from[i] != i {
			built[i] = built[from[i]][:len(l):len(l)]
			continue
		}
		start := len(arr)
		for _, kn := range l {
			arr = append(arr, cut(slices.Index(names[:n], kn)))
		}
		built[i] = arr[start:len(arr):len(arr)]
	}
	ks.AcquireKeys, ks.releaseKeys, ks.leaseKeys = built[0], built[1], built[2]
	return ks
}

// NameEscaper makes any byte string safe inside a hash tag: '{' and '}' would
// end the tag early and change the slot. '%' is escaped too, so the mapping is
// one-to-one.
var NameEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// extendsKey names the hash in which Redis keeps, for each holder of k's
// lock, the generation of its latest Extend (extend.lua). It is named for
// each request that renews or extends a lease, not with the lock's other
// names, which every acquisition builds.
func (k *Keys) extendsKey() string { return k.Tag + ":extends" }

// InspectArgs returns what inspect.lua reads of k, which Client.Inspect
// reports: its KEYS, and its mode ("fair", "rw", "sem" or "latch"). An
// Election is read as a FairMutex: its leader record is no hold (Leader
// reads it).
func (k *Keys) InspectArgs() ([]string, string) {
	switch k.Kind {
	case LatchKind:
		return []string{k.Tag}, "latch"
	case RWReadKind, RWWriteKind:
		return k.AcquireKeys, "rw"
	case SemKind:
		return k.AcquireKeys, "sem"
	case ElectionKind:
		return k.AcquireKeys[:3], "fair"
	}
	// A Group key is read as a FairMutex: its runner holds the lease, the
	// callers that wait for its result wait in line.
	return k.AcquireKeys, "fair"
}

// fenceKeys are raise_fence.lua's KEYS for k: its state, or its lock hash
// (or a Semaphore's hash) and fence key.
func (k *Keys) fenceKeys() []string {
	if k.Kind.leaseIn == leaseInState {
		return k.AcquireKeys[:1]
	}
	return k.AcquireKeys[:2]
}

// slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key if it has none, modulo 16384.
func slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
