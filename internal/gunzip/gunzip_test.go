package gunzip

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"testing"
)

func gz(s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(s))
	_ = zw.Close()
	return b.Bytes()
}

type failing struct{ err error }

func (f failing) Read([]byte) (int, error) { return 0, f.err }

// TestNewReader: a whole stream reads back; a cut or corrupt one ends in
// an *Error after what came before it, with the offset; the input's own
// failure passes as it came, not as damage.
func TestNewReader(t *testing.T) {
	whole := gz("hello, ")
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		in      io.Reader
		want    string
		damaged bool
		err     error
	}{
		{"whole", bytes.NewReader(whole), "hello, ", false, nil},
		{"two members", bytes.NewReader(append(gz("a"), gz("b")...)), "ab", false, nil},
		{"cut", bytes.NewReader(whole[:len(whole)-4]), "hello, ", true, nil},
		{"not gzip", bytes.NewReader([]byte("{}\n")), "", true, nil},
		{"trailing garbage", bytes.NewReader(append(gz("a"), "xx"...)), "a", true, nil},
		{"the input fails", io.MultiReader(bytes.NewReader(whole[:10]), failing{boom}), "", false, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := io.ReadAll(NewReader(tc.in))
			var ge *Error
			if string(got) != tc.want || errors.As(err, &ge) != tc.damaged || (tc.err != nil && !errors.Is(err, tc.err)) {
				t.Fatalf("read %q, %v (%T); want %q, damaged %v, %v", got, err, err, tc.want, tc.damaged, tc.err)
			}
			if ge != nil && ge.Offset != int64(len(got)) {
				t.Errorf("offset %d, want %d", ge.Offset, len(got))
			}
		})
	}
}
