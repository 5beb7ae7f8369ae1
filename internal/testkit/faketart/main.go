// Command tart is a fake of Cirrus Labs' tart CLI for Linux machines and
// CI: the subset control/provider/tart drives, with tart's arguments,
// output formats, exit codes and error texts, and its timing shape (a
// clone takes a moment, a boot seconds). Each VM is a directory under
// $TART_HOME/vms (tart's own layout); a running VM is a `tart run`
// process whose guest is a real process tree in that directory (what
// `tart exec` starts, such as an sshd). docs/faketart.md lists the real
// behaviours it mirrors and where they come from. `make faketart` builds
// it into bin/tart.
//
// Delays are set by environment, for tests: FAKETART_CLONE_DELAY,
// FAKETART_PULL_DELAY, FAKETART_BOOT_DELAY, FAKETART_RESUME_DELAY
// (Go durations), and FAKETART_MAX_VMS (the licence limit, default 2).
package main

import (
	"fmt"
	"os"
)

// version is what `tart --version` prints; FAKETART_VERSION overrides it
// (tests of the provider's preflight).
const version = "2.28.0"

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "Usage: tart <subcommand>")
		return 64
	}
	h, err := openHome()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		return 1
	}
	cmd, rest := args[0], args[1:]
	var code int
	switch cmd {
	case "--version", "version":
		v := os.Getenv("FAKETART_VERSION")
		if v == "" {
			v = version
		}
		fmt.Println(v)
	case "list":
		code = h.list(rest)
	case "clone":
		code = h.clone(rest)
	case "set":
		code = h.set(rest)
	case "run":
		code = h.run(rest)
	case "stop":
		code = h.stop(rest)
	case "suspend":
		code = h.suspend(rest)
	case "delete":
		code = h.delete(rest)
	case "rename":
		code = h.rename(rest)
	case "ip":
		code = h.ip(rest)
	case "exec":
		code = h.exec(rest)
	case "export":
		code = h.export(rest)
	case "import":
		code = h.importVM(rest)
	default:
		fmt.Fprintf(os.Stderr, "Error: Unknown subcommand '%s'.\n", cmd)
		code = 64
	}
	return code
}

// fail prints tart's "Error: ..." line and returns exit code 1.
func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "Error: "+format+"\n", a...)
	return 1
}
