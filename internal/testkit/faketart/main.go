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
//
// Run under the name sw_vers (`make faketart` links bin/sw_vers to it),
// it is macOS's `sw_vers -productVersion` instead, answering
// FAKETART_MACOS_VERSION (default 15.1): the host's version that the
// provider's preflight reads, from beside the tart binary.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// version is what `tart --version` prints; FAKETART_VERSION overrides it
// (tests of the provider's preflight).
const version = "2.28.0"

// macOSVersion is what the fake sw_vers prints by default: a host that
// can suspend VMs (macOS 14 or later).
const macOSVersion = "15.1"

func main() {
	if filepath.Base(os.Args[0]) == "sw_vers" {
		os.Exit(swVers(os.Args[1:]))
	}
	os.Exit(run(os.Args[1:]))
}

// swVers is the subset of sw_vers the provider reads.
func swVers(args []string) int {
	v := os.Getenv("FAKETART_MACOS_VERSION")
	if v == "" {
		v = macOSVersion
	}
	switch {
	case len(args) == 1 && args[0] == "-productVersion":
		fmt.Println(v)
	case len(args) == 0:
		fmt.Printf("ProductName:\t\tmacOS\nProductVersion:\t\t%s\n", v)
	default:
		fmt.Fprintln(os.Stderr, "usage: sw_vers [-productName|-productVersion|-buildVersion]")
		return 1
	}
	return 0
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
