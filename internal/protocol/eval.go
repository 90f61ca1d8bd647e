package protocol

// Running a script: by its SHA with the text as the fallback for NOSCRIPT,
// its arguments from a pool, its reply as one value.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// eval runs script s with keys, then key if not empty, and args, as
// Script.Run does (EVALSHA, then EVAL if the server does not know it), copy
// by copy (send), with the command's arguments in one slice built here and
// reused by later calls once this one has its reply (rclient.Client.Once
// is done with it when it returns): the call allocates
// only what boxing the keys takes, and args can stay on the caller's stack.
func (n *Node) eval(ctx context.Context, s *Script, keys []string, key string, args ...any) evalReply {
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

// Int64 returns the reply as an integer.
func (r evalReply) Int64() (int64, error) { return int64Of(r.v, r.err) }

// run runs script s with keys and args as go-redis's Script.Run does:
// EVALSHA (EVALSHA_RO if ro), then EVAL (EVAL_RO) of its body if the server
// does not know it; with the Redis client's own retries, for the calls that
// give the same outcome when run twice.
func (n *Node) run(ctx context.Context, s *Script, ro bool, keys []string, args ...any) (any, error) {
	a := make([]any, 0, 3+len(keys)+len(args))
	sha, eval := "evalsha", "eval"
	if ro {
		sha, eval = "evalsha_ro", "eval_ro"
	}
	a = append(a, sha, shaArg(s), len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	v, err := n.c.Do(ctx, a...)
	if noScript(err) {
		a[0], a[1] = eval, srcArg(s)
		v, err = n.c.Do(ctx, a...)
	}
	return v, err
}

// int64Of returns the reply v, or err, as an integer.
func int64Of(v any, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("unexpected reply %T, want an integer", v)
}

// sliceOf returns the reply v, or err, as an array.
func sliceOf(v any, err error) ([]any, error) {
	if err != nil {
		return nil, err
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %T, want an array", v)
	}
	return a, nil
}

// int64sOf returns the reply v, or err, as an array of integers.
func int64sOf(v any, err error) ([]int64, error) {
	a, err := sliceOf(v, err)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(a))
	for i, e := range a {
		if out[i], err = int64Of(e, nil); err != nil {
			return nil, err
		}
	}
	return out, nil
}
