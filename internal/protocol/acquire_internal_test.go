package protocol

import (
	"testing"
	"time"
)

// TestDecodeAcquire: every shape of an acquire script's reply decodes to
// what it says, and a reply of no known shape is an error.
func TestDecodeAcquire(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		reply any
		want  AcquireResult
	}{
		{"taken", int64(7), AcquireResult{Fence: 7}},
		{"taken already, 250ms left", []any{int64(7), int64(250)}, AcquireResult{Fence: 7, Already: true, Left: 250 * time.Millisecond}},
		{"taken already, about to lapse", []any{int64(7), int64(0)}, AcquireResult{Fence: 7, Already: true}},
		{"taken already, no expiry", []any{int64(7), int64(-1)}, AcquireResult{Fence: 7, Already: true, Left: -time.Millisecond}},
		{"re-entered", int64(replyReentered), AcquireResult{Reentered: true}},
		{"gone", int64(replyGone), AcquireResult{Gone: true}},
		{"held", []any{int64(-103), int64(5), int64(9)}, AcquireResult{Pttl: 100 * time.Millisecond, Floor: 5, At: 9}},
		{"too late", []any{int64(0), int64(9)}, AcquireResult{Expired: true, At: 9}},
	} {
		got, err := decodeAcquire(c.reply)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got.FenceArg = FenceArg{}
		if got != c.want {
			t.Errorf("%s: decodeAcquire(%v) = %+v, want %+v", c.name, c.reply, got, c.want)
		}
	}
	for _, bad := range []any{"OK", []any{int64(1)}, []any{"a", int64(1)}, []any{int64(-5), int64(1)}, []any{int64(7), int64(-2)}} {
		if r, err := decodeAcquire(bad); err == nil {
			t.Errorf("decodeAcquire(%v) = %+v, want an error", bad, r)
		}
	}
}
