package lifecycle_test

import (
	"errors"
	"testing"

	"github.com/sbxedge/sbx/control/lifecycle"
)

func TestExecDir(t *testing.T) {
	const ws = "/home/sbx/workspace"
	for _, c := range []struct {
		cwd, want string
		bad       bool
	}{
		{cwd: "", want: ws},
		{cwd: ".", want: ws},
		{cwd: "src/app", want: ws + "/src/app"},
		{cwd: "src/../lib/", want: ws + "/lib"},
		{cwd: ws, want: ws},
		{cwd: ws + "/src", want: ws + "/src"},
		{cwd: ws + "/a/../b", want: ws + "/b"},
		{cwd: "..", bad: true},
		{cwd: "src/../../x", bad: true},
		{cwd: "/etc", bad: true},
		{cwd: "/home/sbx/workspace2", bad: true},
		{cwd: ws + "/../other", bad: true},
		{cwd: "src\nx", bad: true},
	} {
		got, err := lifecycle.ExecDir(ws, c.cwd)
		var fe *lifecycle.FieldError
		switch {
		case c.bad && (!errors.As(err, &fe) || fe.Field != "cwd"):
			t.Errorf("ExecDir(%q) = %q, %v; want a cwd field error", c.cwd, got, err)
		case !c.bad && (err != nil || got != c.want):
			t.Errorf("ExecDir(%q) = %q, %v; want %q", c.cwd, got, err, c.want)
		}
	}
}
