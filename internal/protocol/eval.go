package protocol

// Running a script: by its SHA with the text as the fallback for NOSCRIPT,
// its arguments from a pool, its reply as one value.

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// eval runs script s with keys, then key if not empty, and args, as
// Script.Run does (EVALSHA, then EVAL if the server does not know it), copy
// by copy (send), with the command's arguments in one slice built here and
// reused by later calls once this one has its reply (go-redis, and its
// hooks, are done with a command when Process returns): the call allocates
// only what boxing the keys takes, and args can stay on the caller's stack.
func (n *Node) eval(ctx context.Context, s *redis.Script, keys []string, key string, args ...any) evalReply {
	nk := len(keys)
	if key != "" {
		nk++
	}
	p := evalArgs.Get().(*[]any)
	a := append((*p)[:0], "evalsha", shaArg(s), nk)
	for _, k := range keys {
		a = append(a, k)
	}
	if key != "" {
		a = append(a, key)
	}
	a = append(a, args...)
	r := n.send(ctx, s, a)
	clear(a)
	*p = a[:0]
	evalArgs.Put(p)
	return evalReply{r.v, refused(r.err), r.doubt, r.retried}
}

// evalArgs holds argument slices for eval to reuse.
var evalArgs = sync.Pool{New: func() any {
	a := make([]any, 0, 16)
	return &a
}}

// evalReply is the reply of a script call, or its error, and what send
// knows of its copies.
type evalReply struct {
	v       any
	err     error
	doubt   bool // a copy's outcome is unknown
	retried bool // the reply follows a copy that may have run
}

// Result returns the reply and the error.
func (r evalReply) Result() (any, error) { return r.v, r.err }

// Int64 returns the reply as an integer, as redis.Cmd.Int64 does.
func (r evalReply) Int64() (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	switch v := r.v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("redis: unexpected type=%T for Int64", r.v)
}
