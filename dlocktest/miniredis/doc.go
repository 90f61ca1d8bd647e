// Package miniredis holds no code: its tests record, against
// github.com/alicebob/miniredis/v2, which dlock calls work on miniredis and
// which fail and why (docs/testing.md lists them). It is a module of its
// own so that dlock's core module does not depend on miniredis.
package miniredis
