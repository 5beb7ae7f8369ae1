package main

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// home is $TART_HOME (default ~/.tart): vms/<name>/ for local VMs and
// cache/OCIs/<ref>/ for pulled images, as tart lays them out.
type home struct {
	root string
}

func openHome() (*home, error) {
	root := os.Getenv("TART_HOME")
	if root == "" {
		d, err := os.UserHomeDir()
		if err != nil {
			return nil, err
		}
		root = filepath.Join(d, ".tart")
	}
	for _, d := range []string{"vms", "cache/OCIs"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, err
		}
	}
	return &home{root: root}, nil
}

// config is the part of tart's config.json the fake reads and writes.
type config struct {
	Version    int    `json:"version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPUCount   int    `json:"cpuCount"`
	MemorySize int64  `json:"memorySize"` // bytes, as tart stores it
	MACAddress string `json:"macAddress"`
	DiskGB     int    `json:"diskSize"` // the fake's stand-in for disk.img's size
}

// Files of a VM directory. config.json and state.vzvmsave are tart's
// names; the rest are the fake's bookkeeping.
const (
	configFile  = "config.json"
	stateFile   = "state.vzvmsave" // a suspended VM's memory
	diskDir     = "disk"           // the guest's file system
	pidFile     = "run.pid"        // the `tart run` process of a running VM
	bootedFile  = "booted"         // the guest has booted: ip and exec answer
	suspendFlag = "suspendable"    // run with --suspendable
	suspendReq  = "suspend.request"
)

// guestHome is the guest user's home inside disk/: the cirruslabs
// images log in as admin.
const guestHome = "Users/admin"

var errNoVM = errors.New("no such VM")

func (h *home) vmDir(name string) string { return filepath.Join(h.root, "vms", name) }

// validName keeps a name to one path element.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00") && !strings.HasPrefix(name, ".")
}

// remote reports whether name is an OCI reference (ghcr.io/org/image:tag).
func remote(name string) bool { return strings.Contains(name, "/") }

func (h *home) ociDir(ref string) string {
	return filepath.Join(h.root, "cache", "OCIs", strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref))
}

func readConfig(dir string) (config, error) {
	var c config
	b, err := os.ReadFile(filepath.Join(dir, configFile))
	if errors.Is(err, fs.ErrNotExist) {
		return c, errNoVM
	}
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(b, &c)
}

func writeConfig(dir string, c config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, configFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, configFile))
}

func randomMAC() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	b[0] = (b[0] | 2) &^ 1 // locally administered, unicast
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3], b[4], b[5])
}

// ipOf is the guest's address: on a Mac the DHCP lease of the VM's MAC
// (stable across boots, new for a clone); here a loopback address made
// from the MAC, so every VM has its own IP and its guest's servers can
// listen on the same port as another VM's.
func ipOf(mac string) string {
	var b [6]int
	if _, err := fmt.Sscanf(mac, "%x:%x:%x:%x:%x:%x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]); err != nil {
		return "127.64.0.1"
	}
	return fmt.Sprintf("127.%d.%d.%d", 64+b[3]%128, b[4], 1+b[5]%254)
}

// runPID returns the pid of the VM's `tart run` process if it is alive.
func runPID(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, alive(pid)
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z' && stat[i+2] != 'X'
}

// state is tart's VM state: running, suspended or stopped.
func state(dir string) string {
	if _, ok := runPID(dir); ok {
		return "running"
	}
	if exists(filepath.Join(dir, stateFile)) {
		return "suspended"
	}
	return "stopped"
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// names lists the local VMs.
func (h *home) names() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(h.root, "vms"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && validName(e.Name()) && exists(filepath.Join(h.root, "vms", e.Name(), configFile)) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// lock takes an exclusive lock on the home, so two `tart run`s cannot
// both see one free slot.
func (h *home) lock() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(h.root, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// envDuration reads a delay from the environment.
func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

// copyTree copies src to dst (new): a regular copy stands in for APFS's
// copy-on-write clone. Sparse files stay sparse enough for tests: holes
// are not preserved, so the fake never copies a suspended VM's state.
func copyTree(src, dst string, skip func(rel string) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel != "." && skip(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case info.Mode().IsRegular():
			return copyFile(p, target, info.Mode().Perm())
		}
		return nil // sockets and the like are not part of a disk
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
