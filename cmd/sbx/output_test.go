package main

import (
	"bytes"
	"testing"
)

// TestTableEscapesControlCharacters: a cell the sandbox chose (a file
// name) reaches the terminal with its control characters escaped. Found
// from the outside: `sbx files ls` printed a file name's ESC ] 0 ; ... BEL
// raw, retitling the user's terminal.
func TestTableEscapesControlCharacters(t *testing.T) {
	for _, tc := range []struct{ name, cell, want string }{
		{"plain", "notes.txt", "notes.txt"},
		{"spaces and unicode", "my notes é.txt", "my notes é.txt"},
		{"OSC title", "evil\x1b]0;PWNED\x07x", `evil\x1b]0;PWNED\ax`},
		{"CSI colour", "\x1b[31mred", `\x1b[31mred`},
		{"C1 CSI", "a\u009b31mb", `a\u009b31mb`},
		{"newline and tab", "a\nb\tc", `a\nb\tc`},
		{"bidi override", "txt.\u202eexe", `txt.\u202eexe`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tb := newTable(&b, "NAME")
			tb.row(tc.cell)
			if err := tb.flush(); err != nil {
				t.Fatal(err)
			}
			if got, want := b.String(), "NAME\n"+tc.want+"\n"; got != want {
				t.Errorf("table of %q: got %q, want %q", tc.cell, got, want)
			}
		})
	}
}

// The files API sends a POSIX mode and a type; ls's rendering needs both.
func TestModeString(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		mode uint32
		want string
	}{
		{"dir", 0o755, "drwxr-xr-x"},
		{"file", 0o640, "-rw-r-----"},
		{"symlink", 0o777, "lrwxrwxrwx"},
		{"file", 0o4755, "-rwsr-xr-x"},
		{"file", 0o2644, "-rw-r-Sr--"},
		{"dir", 0o1777, "drwxrwxrwt"},
		{"other", 0o600, "?rw-------"},
	} {
		if got := modeString(tc.typ, tc.mode); got != tc.want {
			t.Errorf("modeString(%q, %#o) = %q, want %q", tc.typ, tc.mode, got, tc.want)
		}
	}
}
