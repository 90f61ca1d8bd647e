package protocol

// Keys that dlock did not write: a key of a lock's that holds another type
// than the one dlock keeps there fails a script (or a plain read) with
// Redis's WRONGTYPE, which names neither the key nor the cause. foreign
// turns it into an error that does.

import (
	"context"
	"slices"
	"strings"

	"github.com/dlock-go/dlock/internal/errs"
	"github.com/dlock-go/dlock/internal/rclient"
)

// foreignAdvice ends the error of a key dlock did not write, as lib_state.lua's
// st_read ends its own for a lock key that holds no lock state.
const foreignAdvice = "another program writes under this prefix (give dlock its own with WithPrefix)"

// foreign returns err, the failure of a request about k's lock, unless it is
// Redis's WRONGTYPE: then an error that names the key of the lock that holds
// a type dlock does not keep there, found with TYPE (one round trip, on this
// failure alone), and says what to do. If no key can be named (TYPE is
// refused, or the key changed meanwhile), the error names the lock's keys and
// keeps Redis's.
func (n *Node) foreign(ctx context.Context, k Keys, err error) error {
	if !wrongType(err) {
		return err
	}
	var keys []string
	for _, list := range [][]string{k.AcquireKeys, k.releaseKeys, k.leaseKeys} {
		for _, key := range list {
			if !slices.Contains(keys, key) {
				keys = append(keys, key)
			}
		}
	}
	if k.Kind == LatchKind {
		keys = append(keys, k.Tag, k.Tag+latchOpenedSuffix)
	}
	return n.foreignKeys(ctx, k.Kind, k.Tag, keys, err)
}

// foreignKeys is foreign for keys of a lock of kind whose keys start with
// tag.
func (n *Node) foreignKeys(ctx context.Context, kind *Layout, tag string, keys []string, err error) error {
	if !wrongType(err) {
		return err
	}
	cmds := make([]rclient.Cmd, len(keys))
	for i, key := range keys {
		cmds[i].Args = []any{"type", key}
	}
	if n.c.Pipe(ctx, cmds) == nil {
		for i, c := range cmds {
			t, _ := c.Reply.(string)
			if c.Err == nil && t != "" && t != "none" && !keptType(kind, tag, keys[i], t) {
				return errs.Op(nil, nil, "key %s holds a %s, which dlock did not write: %s", keys[i], t, foreignAdvice)
			}
		}
	}
	return errs.Op(nil, err, "a key of %s %s* holds a type dlock does not keep there: %s", kind.Name, tag, foreignAdvice)
}

// keptType reports whether t, a type TYPE names, is one dlock keeps at key,
// a key of a lock of kind whose keys start with tag (the key names of
// kinds.go's keyNames, and a latch's record of its opening).
func keptType(kind *Layout, tag, key, t string) bool {
	suffix, ok := strings.CutPrefix(key, tag)
	switch {
	case !ok:
		return false
	case suffix == "" && kind == LatchKind:
		// A latch's hash, or the string an earlier version armed.
		return t == "hash" || t == "string"
	case suffix == "" && kind.leaseIn == leaseInState:
		return t == "string"
	case suffix == "":
		return t == "hash" // a lock hash, a Semaphore's hash
	case suffix == keyNames["fence"], suffix == keyNames["total"]:
		return t == "string"
	case suffix == keyNames["waiters"], suffix == keyNames["holders"], suffix == keyNames["readers"], suffix == keyNames["writers"]:
		return t == "zset"
	}
	return t == "hash" // alive, fences, leader, extends, a latch's opening
}
