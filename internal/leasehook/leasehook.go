// Package leasehook is how package dlocktest reaches into the leases of
// package dlock without dlock exporting anything for it: dlock sets these
// functions when it is initialised, and dlocktest calls them.
package leasehook

import "context"

// Lose and Steal take away a lease (a *dlock.Lease or a *dlock.Leadership)
// in Redis, then have its Client check it at once, so that the lease has
// ended, as lost, when they return nil. Lose frees the lock as its expiry
// would; Steal then gives it to another owner, with a higher fence. They
// return an error, and change nothing, for a nil or ended lease.
var Lose, Steal func(ctx context.Context, lease any) error
