package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// parse parses args with fs (flags may come before or after the
// positional arguments, as Swift's ArgumentParser allows) and returns
// the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func usage(err error) int {
	fmt.Fprintf(os.Stderr, "Error: %v\n", err)
	return 64 // ArgumentParser's validation exit code
}

// vmInfo is one entry of `tart list --format json`.
type vmInfo struct {
	Source  string
	Name    string
	Disk    int
	Size    int
	Running bool
	State   string
}

func (h *home) list(args []string) int {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	format := fs.String("format", "text", "")
	source := fs.String("source", "", "")
	quiet := fs.Bool("quiet", false, "")
	fs.BoolVar(quiet, "q", false, "")
	if _, err := parse(fs, args); err != nil {
		return usage(err)
	}
	if *source != "" && *source != "local" && *source != "oci" {
		return usage(fmt.Errorf("'%s' is not a valid <source>", *source))
	}
	var infos []vmInfo
	if *source != "oci" {
		names, err := h.names()
		if err != nil {
			return fail("%v", err)
		}
		for _, n := range names {
			dir := h.vmDir(n)
			c, err := readConfig(dir)
			if err != nil {
				continue // deleted meanwhile
			}
			st := state(dir)
			infos = append(infos, vmInfo{Source: "local", Name: n, Disk: c.DiskGB, Size: sizeGB(dir), Running: st == "running", State: st})
		}
	}
	if *source != "local" {
		ents, _ := os.ReadDir(filepath.Join(h.root, "cache", "OCIs"))
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(h.root, "cache", "OCIs", e.Name(), "ref")); err == nil {
				infos = append(infos, vmInfo{Source: "OCI", Name: string(b), Disk: 50, Size: 0, State: "stopped"})
			}
		}
	}
	sort.SliceStable(infos, func(i, j int) bool {
		return infos[i].Source > infos[j].Source || infos[i].Source == infos[j].Source && infos[i].Name < infos[j].Name
	})
	switch {
	case *quiet:
		for _, in := range infos {
			fmt.Println(in.Name)
		}
	case *format == "json":
		if infos == nil {
			infos = []vmInfo{}
		}
		b, _ := json.MarshalIndent(infos, "", "  ")
		fmt.Println(string(b))
	default:
		fmt.Printf("%-6s %-40s %-4s %-4s %s\n", "Source", "Name", "Disk", "Size", "State")
		for _, in := range infos {
			fmt.Printf("%-6s %-40s %-4d %-4d %s\n", in.Source, in.Name, in.Disk, in.Size, in.State)
		}
	}
	return 0
}

// sizeGB is the VM's allocated size in whole GB, as tart's Size column.
func sizeGB(dir string) int {
	var blocks int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				blocks += st.Blocks
			}
		}
		return nil
	})
	return int(blocks * 512 >> 30)
}

func (h *home) clone(args []string) int {
	fs := flag.NewFlagSet("clone", flag.ContinueOnError)
	fs.Bool("insecure", false, "")
	fs.Int("concurrency", 4, "")
	pos, err := parse(fs, args)
	if err != nil || len(pos) != 2 {
		return usage(errors.New("clone takes <source-name> <new-name>"))
	}
	src, dst := pos[0], pos[1]
	if remote(dst) || !validName(dst) {
		return fail("invalid VM name %q: cannot clone into a remote name", dst)
	}
	srcDir := h.vmDir(src)
	if remote(src) {
		if srcDir, err = h.pull(src); err != nil {
			return fail("%v", err)
		}
	} else if !validName(src) || !exists(filepath.Join(srcDir, configFile)) {
		return fail("the specified VM \"%s\" does not exist", src)
	}
	if exists(h.vmDir(dst)) {
		return fail("VM \"%s\" already exists", dst)
	}
	time.Sleep(envDuration("FAKETART_CLONE_DELAY", 300*time.Millisecond))
	tmp := filepath.Join(h.root, "vms", fmt.Sprintf(".clone-%s-%d", dst, os.Getpid()))
	skip := func(rel string) bool {
		switch rel {
		case pidFile, bootedFile, suspendFlag, suspendReq, stateFile, "ref":
			return true
		}
		return false
	}
	if err := copyTree(srcDir, tmp, skip); err != nil {
		os.RemoveAll(tmp)
		return fail("%v", err)
	}
	c, err := readConfig(tmp)
	if err == nil {
		c.MACAddress = randomMAC() // tart clone gives the clone its own MAC
		err = writeConfig(tmp, c)
	}
	if err == nil {
		err = os.Rename(tmp, h.vmDir(dst))
	}
	if err != nil {
		os.RemoveAll(tmp)
		if exists(h.vmDir(dst)) {
			return fail("VM \"%s\" already exists", dst)
		}
		return fail("%v", err)
	}
	return 0
}

// pull fetches ref into the OCI cache (once; FAKETART_PULL_DELAY) and
// returns its directory: a macOS image with 4 CPUs, 8 GB and a 50 GB disk.
func (h *home) pull(ref string) (string, error) {
	dir := h.ociDir(ref)
	if exists(filepath.Join(dir, configFile)) {
		return dir, nil
	}
	fmt.Printf("pulling %s...\n", ref)
	time.Sleep(envDuration("FAKETART_PULL_DELAY", time.Second))
	tmp := dir + fmt.Sprintf(".pull-%d", os.Getpid())
	if err := os.MkdirAll(filepath.Join(tmp, diskDir, guestHome), 0o755); err != nil {
		return "", err
	}
	c := config{Version: 1, OS: "darwin", Arch: "arm64", CPUCount: 4, MemorySize: 8 << 30, MACAddress: randomMAC(), DiskGB: 50}
	if err := writeConfig(tmp, c); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, "ref"), []byte(ref), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil && !exists(filepath.Join(dir, configFile)) {
		return "", err
	}
	os.RemoveAll(tmp)
	return dir, nil
}

func (h *home) set(args []string) int {
	fs := flag.NewFlagSet("set", flag.ContinueOnError)
	cpu := fs.Int("cpu", 0, "")
	mem := fs.Int64("memory", 0, "") // MB, as tart's --memory
	disk := fs.Int("disk-size", 0, "")
	pos, err := parse(fs, args)
	if err != nil || len(pos) != 1 {
		return usage(errors.New("set takes <name>"))
	}
	dir := h.vmDir(pos[0])
	c, err := readConfig(dir)
	if err != nil {
		return fail("the specified VM \"%s\" does not exist", pos[0])
	}
	if *cpu > 0 {
		c.CPUCount = *cpu
	}
	if *mem > 0 {
		c.MemorySize = *mem << 20
	}
	if *disk > 0 {
		c.DiskGB = *disk
	}
	if err := writeConfig(dir, c); err != nil {
		return fail("%v", err)
	}
	return 0
}

func (h *home) rename(args []string) int {
	pos, err := parse(flag.NewFlagSet("rename", flag.ContinueOnError), args)
	if err != nil || len(pos) != 2 || !validName(pos[0]) || !validName(pos[1]) {
		return usage(errors.New("rename takes <name> <new-name>"))
	}
	if !exists(filepath.Join(h.vmDir(pos[0]), configFile)) {
		return fail("the specified VM \"%s\" does not exist", pos[0])
	}
	if exists(h.vmDir(pos[1])) {
		return fail("VM \"%s\" already exists", pos[1])
	}
	if err := os.Rename(h.vmDir(pos[0]), h.vmDir(pos[1])); err != nil {
		return fail("%v", err)
	}
	return 0
}

func (h *home) delete(args []string) int {
	pos, err := parse(flag.NewFlagSet("delete", flag.ContinueOnError), args)
	if err != nil || len(pos) == 0 {
		return usage(errors.New("delete takes one or more <name>"))
	}
	for _, n := range pos {
		dir := h.vmDir(n)
		if !validName(n) || !exists(filepath.Join(dir, configFile)) {
			return fail("the specified VM \"%s\" does not exist", n)
		}
		if _, ok := runPID(dir); ok {
			return fail("VM \"%s\" is running", n)
		}
		_ = endGuest(dir)
		if err := os.RemoveAll(dir); err != nil {
			return fail("%v", err)
		}
	}
	return 0
}

func (h *home) ip(args []string) int {
	fs := flag.NewFlagSet("ip", flag.ContinueOnError)
	wait := fs.Int("wait", 0, "")
	pos, err := parse(fs, args)
	if err != nil || len(pos) != 1 {
		return usage(errors.New("ip takes <name>"))
	}
	dir := h.vmDir(pos[0])
	c, err := readConfig(dir)
	if err != nil {
		fmt.Printf("the specified VM \"%s\" does not exist\n", pos[0])
		return 1
	}
	deadline := time.Now().Add(time.Duration(*wait) * time.Second)
	for {
		if _, ok := runPID(dir); ok && exists(filepath.Join(dir, bootedFile)) {
			fmt.Println(ipOf(c.MACAddress))
			return 0
		}
		if !time.Now().Before(deadline) {
			// tart prints this on stdout, not stderr.
			fmt.Println("no IP address found, is your VM running?")
			return 1
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (h *home) stop(args []string) int {
	fs := flag.NewFlagSet("stop", flag.ContinueOnError)
	timeout := fs.Int("timeout", 30, "")
	fs.IntVar(timeout, "t", 30, "")
	pos, err := parse(fs, args)
	if err != nil || len(pos) != 1 {
		return usage(errors.New("stop takes <name>"))
	}
	dir := h.vmDir(pos[0])
	if !exists(filepath.Join(dir, configFile)) {
		return fail("the specified VM \"%s\" does not exist", pos[0])
	}
	pid, ok := runPID(dir)
	if !ok {
		_ = endGuest(dir) // a `tart run` killed hard leaves its guest
		return fail("VM \"%s\" is not running", pos[0])
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if !waitExit(pid, time.Duration(*timeout)*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitExit(pid, 5*time.Second)
	}
	_ = endGuest(dir)
	return 0
}

func (h *home) suspend(args []string) int {
	pos, err := parse(flag.NewFlagSet("suspend", flag.ContinueOnError), args)
	if err != nil || len(pos) != 1 {
		return usage(errors.New("suspend takes <name>"))
	}
	dir := h.vmDir(pos[0])
	if !exists(filepath.Join(dir, configFile)) {
		return fail("the specified VM \"%s\" does not exist", pos[0])
	}
	pid, ok := runPID(dir)
	if !ok {
		return fail("VM \"%s\" is not running", pos[0])
	}
	if !exists(filepath.Join(dir, suspendFlag)) {
		return fail("VM \"%s\" was not started with --suspendable", pos[0])
	}
	if err := os.WriteFile(filepath.Join(dir, suspendReq), nil, 0o644); err != nil {
		return fail("%v", err)
	}
	_ = syscall.Kill(pid, syscall.SIGUSR1)
	if !waitExit(pid, time.Minute) {
		return fail("VM \"%s\" did not suspend", pos[0])
	}
	return 0
}

func waitExit(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// run is the VM: it stays in the foreground until the VM stops, as
// `tart run` does.
func (h *home) run(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.Bool("no-graphics", false, "")
	suspendable := fs.Bool("suspendable", false, "")
	fs.Bool("no-audio", false, "")
	fs.Bool("no-clipboard", false, "")
	pos, err := parse(fs, args)
	if err != nil || len(pos) != 1 {
		return usage(errors.New("run takes <name>"))
	}
	name := pos[0]
	dir := h.vmDir(name)
	unlock, err := h.lock()
	if err != nil {
		return fail("%v", err)
	}
	c, err := readConfig(dir)
	if err != nil || !validName(name) {
		unlock()
		return fail("the specified VM \"%s\" does not exist", name)
	}
	if _, ok := runPID(dir); ok {
		unlock()
		return fail("VM \"%s\" is already running!", name)
	}
	var others []string
	names, _ := h.names()
	for _, n := range names {
		if _, ok := runPID(h.vmDir(n)); ok {
			others = append(others, n)
		}
	}
	limit, _ := strconv.Atoi(os.Getenv("FAKETART_MAX_VMS"))
	if limit <= 0 {
		limit = 2
	}
	if len(others) >= limit {
		unlock()
		// Virtualization.framework's error, with the hint tart adds.
		fmt.Fprintf(os.Stderr, "The number of VMs exceeds the system limit\n\nhint: there are other running VMs: %s\n", strings.Join(others, ", "))
		return 1
	}
	_ = endGuest(dir) // left by a run that was killed hard
	os.Remove(filepath.Join(dir, bootedFile))
	os.Remove(filepath.Join(dir, suspendReq))
	if *suspendable {
		_ = os.WriteFile(filepath.Join(dir, suspendFlag), nil, 0o644)
	} else {
		os.Remove(filepath.Join(dir, suspendFlag))
	}
	err = os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
	unlock()
	if err != nil {
		return fail("%v", err)
	}
	defer os.Remove(filepath.Join(dir, pidFile))
	defer os.Remove(filepath.Join(dir, bootedFile))
	defer func() { _ = endGuest(dir) }()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	boot := envDuration("FAKETART_BOOT_DELAY", 3*time.Second)
	if exists(filepath.Join(dir, stateFile)) {
		// Resuming from a suspend: quicker than a boot; the saved state is
		// consumed, as tart removes it once the VM is restored.
		boot = envDuration("FAKETART_RESUME_DELAY", time.Second)
		os.Remove(filepath.Join(dir, stateFile))
	}
	select {
	case <-time.After(boot):
	case <-sig:
		return 0
	}
	if err := os.WriteFile(filepath.Join(dir, bootedFile), nil, 0o644); err != nil {
		return fail("%v", err)
	}
	for s := range sig {
		if s == syscall.SIGUSR1 && exists(filepath.Join(dir, suspendReq)) {
			os.Remove(filepath.Join(dir, suspendReq))
			_ = endGuest(dir)
			if err := writeState(dir, c.MemorySize); err != nil {
				return fail("suspend: %v", err)
			}
			return 0
		}
		if s != syscall.SIGUSR1 {
			return 0
		}
	}
	return 0
}

// writeState writes the suspended VM's memory: a file of the VM's
// memory size, sparse apart from a header and a page every 64 MB, so a
// 16 GB VM does not take 16 GB of a CI disk but uploads as 16 GB (the
// holes read as zeros). See docs/faketart.md.
func writeState(dir string, size int64) error {
	if scale, err := strconv.ParseFloat(os.Getenv("FAKETART_STATE_SCALE"), 64); err == nil && scale > 0 {
		size = int64(float64(size) * scale)
	}
	f, err := os.Create(filepath.Join(dir, stateFile+".tmp"))
	if err != nil {
		return err
	}
	page := make([]byte, 4096)
	for off := int64(0); off < size; off += 64 << 20 {
		for i := range page {
			page[i] = byte(off>>20) ^ byte(i)
		}
		if _, err := f.WriteAt(page[:min(int64(len(page)), size-off)], off); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(filepath.Join(dir, stateFile+".tmp"), filepath.Join(dir, stateFile))
}

// exec runs a command in the guest, as `tart exec` does through the
// guest agent: in the guest user's home, with its environment; stdin
// only with -i; the command's exit code is tart's.
func (h *home) exec(args []string) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	interactive := fs.Bool("i", false, "")
	fs.Bool("t", false, "")
	// The command's own flags follow the VM name: stop parsing there.
	if err := fs.Parse(args); err != nil {
		return usage(err)
	}
	rest := fs.Args()
	if len(rest) < 2 {
		return usage(errors.New("exec takes <name> and a command"))
	}
	name, argv := rest[0], rest[1:]
	dir := h.vmDir(name)
	if !validName(name) || !exists(filepath.Join(dir, configFile)) {
		return fail("the specified VM \"%s\" does not exist", name)
	}
	if _, ok := runPID(dir); !ok || !exists(filepath.Join(dir, bootedFile)) {
		return fail("VM \"%s\" is not running", name)
	}
	hm := filepath.Join(dir, diskDir, guestHome)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = hm
	cmd.Env = guestEnv(dir, hm)
	if *interactive {
		cmd.Stdin = os.Stdin
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		return fail("%v", err)
	}
	return 0
}

// guestEnv is the environment of the guest's processes; markerEnv is how
// the fake finds them to end them with the VM (see endGuest).
func guestEnv(dir, hm string) []string {
	return []string{
		"HOME=" + hm, "USER=" + os.Getenv("USER"), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8", "SHELL=/bin/sh", markerEnv + "=" + dir,
	}
}
