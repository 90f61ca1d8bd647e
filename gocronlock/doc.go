// Package gocronlock runs gocron v2 schedulers in several instances of a
// service, on dlock: a job fired by every instance runs in one.
//
// gocron offers two ways, and this package implements both:
//
//   - NewElector makes an Elector (gocron.WithDistributedElector): the
//     instances elect a leader with a dlock Election, and only the leader
//     runs jobs, whatever the instances' clocks say. A leader that dies is
//     replaced within the Election's TTL, one that shuts down (Close) at
//     once; around such a change a tick may be run by the old leader and
//     again by the new one, if their schedulers fire it further apart than
//     the change took, or by neither.
//   - NewLocker makes a Locker (gocron.WithDistributedLocker): every instance
//     fires every job, and a dlock Mutex per job lets one of them run each
//     tick. As gocron asks for the job's lock by name, not by tick, the lock
//     is kept for a min hold (WithMinHold, 5s by default) after each run
//     starts: the instances must fire the same tick less than that apart,
//     so schedule with gocron.CronJob or a DurationJob started with
//     AlignedStart, and the job's ticks must be further apart than the min
//     hold, or those within it are skipped.
//
// Choose the Elector for one active instance whatever the schedules, the
// Locker to spread runs over the instances (each tick runs where its lock
// was won); [the gocronlock page] compares them and explains both traps.
//
// Neither can stop a run that outlives its lock or leadership (a paused
// process notices nothing): have the resource check a fence, such as
// Elector.Leadership's Term.
//
// The package is a module of its own, so that dlock's core module does not
// depend on gocron.
//
// [the gocronlock page]: https://github.com/dlock-go/dlock/blob/main/docs/gocronlock.md
package gocronlock
