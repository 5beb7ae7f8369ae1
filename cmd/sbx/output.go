package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// printJSON writes v indented, for scripts (-o json).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows under a header, in aligned columns.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	fmt.Fprintln(t.tw, strings.Join(header, "\t"))
	return t
}

func (t *table) row(cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = terminalSafe(fmt.Sprint(c))
	}
	fmt.Fprintln(t.tw, strings.Join(s, "\t"))
}

// terminalSafe shows the characters of s a terminal would act on or not
// show (escape sequences, C1 controls, tabs and newlines, bidi overrides)
// as Go escapes. A cell can be the sandbox's to choose (a file name), and
// a name must not retitle the window, write the clipboard, move the
// cursor or break the table's columns; ls escapes such names likewise.
func terminalSafe(s string) string {
	unsafe := func(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }
	if !strings.ContainsFunc(s, unsafe) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unsafe(r) {
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (t *table) flush() error { return t.tw.Flush() }

// render prints v as JSON with -o json, else calls human.
func (a *app) render(v any, human func(w io.Writer) error) error {
	if a.output == "json" {
		return printJSON(a.out, v)
	}
	return human(a.out)
}

func localTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func optTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return localTime(*t)
}

// until says how far away t is, for deadlines.
func until(t time.Time, now time.Time) string {
	d := t.Sub(now).Round(time.Minute)
	if d <= 0 {
		return "passed"
	}
	return "in " + strings.TrimSuffix(d.String(), "0s")
}

// sizeString is a byte count for people: 512 B, 3.4 KiB, 1.2 MiB.
func sizeString(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// modeString renders an entry's type and POSIX mode, as the files API
// sends them, the way ls does: drwxr-xr-x, -rwsr-xr-x, drwxrwxrwt.
func modeString(typ string, m uint32) string {
	b := []byte("?rwxrwxrwx")
	switch typ {
	case "file":
		b[0] = '-'
	case "dir":
		b[0] = 'd'
	case "symlink":
		b[0] = 'l'
	}
	for i := range 9 {
		if m&(1<<(8-i)) == 0 {
			b[1+i] = '-'
		}
	}
	// The special bits take the execute column, lower-case over x.
	for _, sp := range []struct {
		bit uint32
		at  int
		c   byte
	}{{0o4000, 3, 's'}, {0o2000, 6, 's'}, {0o1000, 9, 't'}} {
		if m&sp.bit != 0 {
			if b[sp.at] == 'x' {
				b[sp.at] = sp.c
			} else {
				b[sp.at] = sp.c - 'a' + 'A'
			}
		}
	}
	return string(b)
}
