// Package dlockotel records the lock events of a dlock.Client as
// OpenTelemetry metrics and spans, through dlock.Hooks:
//
//	c, err := dlock.New(rdb, dlock.WithHooks(dlockotel.Hooks()))
//
// It is a module of its own, so that dlock itself depends on no OpenTelemetry
// package. Hooks records with the global MeterProvider and TracerProvider
// unless WithMeterProvider or WithTracerProvider give others; the
// instrumentation scope is ScopeName.
//
// # Metrics
//
//	Name                         Instrument  Unit           Attributes
//	dlock.lock.acquire.duration  Histogram   s              dlock.lock.kind, dlock.op, dlock.outcome
//	dlock.lock.hold.duration     Histogram   s              dlock.lock.kind, dlock.outcome
//	dlock.lock.contentions       Counter     {acquisition}  dlock.lock.kind, dlock.op
//	dlock.lock.handoffs          Counter     {acquisition}  dlock.lock.kind, dlock.op
//	dlock.lease.renewals         Counter     {renewal}      dlock.lock.kind, dlock.outcome
//	dlock.lease.lost             Counter     {lease}        dlock.lock.kind
//	dlock.election.terms         Counter     {term}         dlock.outcome
//
// dlock.lock.acquire.duration records every acquisition when it ends, with
// the time it took (LockResult.Waited): each Lock, TryLock, RLock, TryRLock,
// Acquire, TryAcquire and Campaign, re-entries included; a MultiLock records
// one per name. Its dlock.outcome is one of:
//
//	acquired      the lock was acquired
//	reentered     a lease the context carried was re-entered
//	canceled      the context ended (cancelled, or past its deadline) before the lock was acquired
//	not_acquired  otherwise, the error matches dlock.ErrNotAcquired: a TryLock found the lock held,
//	              say, or a re-entry found its lease gone
//	error         any other error: Redis could not be reached, the Client was closed
//
// dlock.lock.hold.duration records each Unlock (or Release) that gives the
// lock up, with the time since the lease was acquired (UnlockResult.Held);
// an Unlock that gives back one hold of a re-entered lease records nothing.
// Its dlock.outcome is ok, or error if that Unlock returned an error (the
// lease was lost, or the release did not reach Redis and the Client retries
// it).
//
// dlock.lock.contentions counts the acquisitions that found the lock held
// and waited for it, once each however long they waited;
// dlock.lock.handoffs, those that a release handed the lock to
// (LockResult.HandedOff).
//
// dlock.lease.renewals counts each renewal of a lease by its Client and each
// Lease.Extend that succeeded (dlock.outcome ok), and each renewal that
// failed for a reason that may pass, to be retried (error). dlock.lease.lost
// counts the leases lost (dlock.ErrLockLost), however they were lost.
//
// dlock.election.terms counts the terms of leadership of the Client's
// Election candidates, with dlock.outcome:
//
//	gained    a Campaign won: a term began
//	resigned  a term ended by Leadership.Resign, or by Client.Close (which resigns what its Client leads)
//	lost      a term lost (dlock.ErrLockLost): its lease was not renewed in time, or found gone
//
// So gained, less resigned and lost, is how many Leaderships the Clients
// that share the hooks hold. The ends come from the hook
// dlock.Hooks.LeadershipEnded.
//
// dlock.lock.kind is LockInfo.Kind: Mutex, FairMutex, RWMutex, Semaphore or
// Election. dlock.op names the acquisition: lock, trylock, rlock, tryrlock,
// acquire, tryacquire or campaign. The name of a lock is never a metric
// attribute: names are unbounded ("order:42"), and every one would make a
// series of its own.
//
// The histograms advise bucket boundaries from 0.5ms to 60s (acquisitions)
// and from 1ms to 1h (holds); a View of the MeterProvider can replace them.
//
// There is no count of the leases held: a lease that Client.Close ends is
// told of by no hook, so such a count would drift. Elections are the
// exception: Close's end of a Leadership is told (dlock.election.terms).
//
// # Spans
//
// Each acquisition is a span named "dlock " followed by its dlock.op ("dlock
// lock", "dlock tryacquire"), and each Unlock or Release a span named "dlock
// unlock", a child of the span of the context given to the call. The call
// makes its Redis requests with a context that carries its span, so that
// spans of those requests (go-redis's own instrumentation, say) are its
// children. The spans' attributes:
//
//	Attribute         Spans    Value
//	dlock.lock.name   all      LockInfo.Name
//	dlock.lock.kind   all      LockInfo.Kind
//	dlock.op          acquire  as in the metrics
//	dlock.outcome     all      as in the metrics
//	dlock.fence       all      the lease's fence; on an acquisition, if acquired
//	dlock.reentered   acquire  LockResult.Reentered, if acquired
//	dlock.handed_off  acquire  LockResult.HandedOff, if acquired
//	dlock.last_hold   unlock   UnlockResult.Last: the Unlock gave the lock up
//
// An acquisition that waited for the lock has an event "contended" at the
// moment it started waiting.
//
// A span's status is Error, with the error recorded as an exception event,
// when its dlock.outcome is error. The outcomes not_acquired and canceled
// leave it unset: a TryLock that finds the lock held, or a caller that stops
// waiting, is an answer of the lock, not a failure of it; dlock.outcome tells
// them apart.
//
// Renewals and losses happen after the acquisition's span has ended, on the
// Client's own goroutines, and are recorded as metrics only.
package dlockotel
