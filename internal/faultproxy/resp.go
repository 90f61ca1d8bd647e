package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxBlob bounds the length a bulk string or aggregate header may announce, so
// that a corrupt stream cannot make the proxy allocate without limit. Redis's
// own limit for a bulk string is 512 MB.
const maxBlob = 512 << 20

var errProtocol = errors.New("faultproxy: malformed RESP")

// reader reads RESP requests and replies from a connection and keeps the
// exact bytes of the last one in raw, so they can be forwarded unchanged.
type reader struct {
	br  *bufio.Reader
	raw []byte
}

func newReader(r io.Reader) *reader {
	return &reader{br: bufio.NewReaderSize(r, 32<<10)}
}

// line reads up to and including the next '\n', appends it to raw and returns
// it without its line ending ("\r\n", or "\n" alone as inline commands may
// end).
func (r *reader) line() ([]byte, error) {
	start := len(r.raw)
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.raw = append(r.raw, chunk...)
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			if err == io.EOF && len(r.raw) > start {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if len(r.raw)-start > maxBlob {
			return nil, errProtocol
		}
	}
	l := r.raw[start : len(r.raw)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

// blob reads n bytes of data and the CRLF after them, appends them to raw and
// returns the data.
func (r *reader) blob(n int) ([]byte, error) {
	start := len(r.raw)
	r.raw = append(r.raw, make([]byte, n+2)...)
	if _, err := io.ReadFull(r.br, r.raw[start:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if r.raw[len(r.raw)-2] != '\r' || r.raw[len(r.raw)-1] != '\n' {
		return nil, errProtocol
	}
	return r.raw[start : start+n], nil
}

// length parses the number in a header line such as "$5" or "*-1".
func length(b []byte) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n > maxBlob {
		return 0, fmt.Errorf("%w: bad length %q", errProtocol, b)
	}
	return n, nil
}

// command reads one request: an array of bulk strings, as clients send them,
// or an inline command (one line, arguments split on spaces). Empty inline
// lines, which Redis ignores, come back as a command with no arguments. The
// request's bytes are in r.raw until the next read.
func (r *reader) command() (Command, error) {
	r.raw = r.raw[:0]
	l, err := r.line()
	if err != nil {
		return nil, err
	}
	if len(l) == 0 || l[0] != '*' {
		var cmd Command
		for _, f := range strings.Fields(string(l)) {
			cmd = append(cmd, []byte(f))
		}
		return cmd, nil
	}
	n, err := length(l[1:])
	if err != nil {
		return nil, err
	}
	cmd := make(Command, 0, max(n, 0))
	for range n {
		h, err := r.line()
		if err != nil {
			return nil, err
		}
		if len(h) == 0 || h[0] != '$' {
			return nil, fmt.Errorf("%w: request element %q is not a bulk string", errProtocol, h)
		}
		size, err := length(h[1:])
		if err != nil || size < 0 {
			return nil, errProtocol
		}
		data, err := r.blob(size)
		if err != nil {
			return nil, err
		}
		cmd = append(cmd, append([]byte(nil), data...))
	}
	return cmd, nil
}

// value describes one complete RESP value read by reply.
type value struct {
	kind byte   // its type byte: '+', '$', '*', '>', ... (for an attributed value, the value's own type)
	text string // a string's content; for an aggregate, the first element's content if it is a string
}

// reply reads one complete RESP2 or RESP3 value; an attribute ('|') is read
// together with the value that follows it. The value's bytes are in r.raw
// until the next read.
func (r *reader) reply() (value, error) {
	r.raw = r.raw[:0]
	return r.value()
}

func (r *reader) value() (value, error) {
	l, err := r.line()
	if err != nil {
		return value{}, err
	}
	if len(l) == 0 {
		return value{}, fmt.Errorf("%w: empty line", errProtocol)
	}
	kind, body := l[0], l[1:]
	switch kind {
	case '+', '-', ':', '_', ',', '#', '(': // simple string, error, integer, null, double, boolean, big number
		return value{kind: kind, text: string(body)}, nil
	case '$', '!', '=': // bulk string, bulk error, verbatim string
		n, err := length(body)
		if err != nil {
			return value{}, err
		}
		if n < 0 { // RESP2 null bulk string
			return value{kind: kind}, nil
		}
		data, err := r.blob(n)
		if err != nil {
			return value{}, err
		}
		return value{kind: kind, text: string(data)}, nil
	case '*', '~', '>', '%', '|': // array, set, push, map, attribute
		n, err := length(body)
		if err != nil {
			return value{}, err
		}
		if kind == '%' || kind == '|' {
			n *= 2
		}
		v := value{kind: kind}
		for i := range n { // n < 0, a RESP2 null array, reads nothing
			e, err := r.value()
			if err != nil {
				return value{}, err
			}
			if i == 0 && isString(e.kind) {
				v.text = e.text
			}
		}
		if kind == '|' { // the attribute is followed by the value it describes
			return r.value()
		}
		return v, nil
	}
	return value{}, fmt.Errorf("%w: unknown type %q", errProtocol, kind)
}

func isString(kind byte) bool {
	return kind == '+' || kind == '$' || kind == '='
}
