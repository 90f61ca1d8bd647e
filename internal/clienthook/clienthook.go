// Package clienthook is how a client module (a nested module such as
// dlockrueidis, on a Redis client other than go-redis) builds a
// *dlock.Client on its rclient.Client, without dlock exporting anything for
// it: dlock sets these functions when it is initialised, and the module
// calls them. A module's own constructors (New, NewRedLock) check their
// Redis clients, then hand them on here.
package clienthook

import "github.com/dlock-go/dlock/internal/rclient"

// New returns a *dlock.Client on c, configured by opts (each a
// dlock.Option), as dlock.New does on a go-redis client; NewRedLock, a
// RedLock Client on the members nodes, as dlock.NewRedLock does. The
// result is a *dlock.Client.
var (
	New        func(c rclient.Client, opts ...any) (any, error)
	NewRedLock func(nodes []rclient.Client, opts ...any) (any, error)
)
