// Package miniredis holds no code: its tests record, against
// github.com/alicebob/miniredis/v2, that dlock refuses miniredis, which runs
// neither SPUBLISH nor SSUBSCRIBE, at a Client's first use, with an error
// that says so (docs/testing.md). It is a module of its own so that dlock's
// core module does not depend on miniredis.
package miniredis
