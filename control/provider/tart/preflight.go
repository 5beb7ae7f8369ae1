package tart

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// MinVersion is the oldest tart the provider drives: `tart exec` (the
// guest agent) and `tart list --format json` with State.
const MinVersion = "2.0.0"

// MinFreeDiskGB is the free space a host needs for a template and a few
// clones (APFS clones share blocks, a suspended VM's state does not).
const MinFreeDiskGB = 20

// MinMacOS is the oldest macOS tart runs on (Virtualization.framework's
// macOS guests); MinSuspendMacOS and MinSuspendTart are what `tart run
// --suspendable` and `tart suspend` need.
const (
	MinMacOS        = "13.0"
	MinSuspendMacOS = "14.0"
	MinSuspendTart  = "1.8.0"
)

// HostInfo is what preflight found on a host.
type HostInfo struct {
	Tart  string `json:"tart"`
	MacOS string `json:"macos"`
	// NoSuspend, when set, says why this host cannot suspend VMs: its
	// macOS sandboxes are exempt from idle suspend.
	NoSuspend string `json:"no_suspend,omitempty"`
}

// Preflight checks every host (see Preflight) and notes the hosts that
// cannot suspend, so CanSuspend says no for macOS and idle macOS
// sandboxes stay up rather than fail to suspend.
func (p *Provider) Preflight(ctx context.Context, minFreeGB int) error {
	var errs []error
	for _, h := range p.hosts {
		info, err := Preflight(ctx, h.driver, minFreeGB)
		if err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", h.name, err))
			continue
		}
		p.mu.Lock()
		h.noSuspend = info.NoSuspend
		p.mu.Unlock()
		if info.NoSuspend != "" && p.cfg.Suspendable {
			p.log.Warn("macOS sandboxes will not be suspended when idle", "host", h.name, "why", info.NoSuspend)
		}
	}
	return errors.Join(errs...)
}

// Preflight checks one host's driver: tart answers and is recent enough,
// the host runs a macOS tart supports, and its disk has room. Errors say
// what to do. A host too old to suspend is not an error: HostInfo says so.
func Preflight(ctx context.Context, d Driver, minFreeGB int) (HostInfo, error) {
	var info HostInfo
	v, err := d.Version(ctx)
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return info, fmt.Errorf("tart is not installed or not executable (%w): install it with `brew install cirruslabs/cli/tart`, or name the binary with --tart PATH / SBX_TART", err)
		}
		return info, fmt.Errorf("`tart --version` failed: %w; check the tart installation", err)
	}
	info.Tart = v
	if !atLeast(v, MinVersion) {
		return info, fmt.Errorf("tart %s is too old: %s or later is needed for `tart exec`; upgrade with `brew upgrade cirruslabs/cli/tart`", v, MinVersion)
	}
	if info.MacOS, err = d.OSVersion(ctx); err != nil {
		return info, fmt.Errorf("read the host's macOS version (%w): tart runs only on macOS; run the host agent on a Mac (Apple Silicon, macOS %s or later)", err, MinMacOS)
	}
	if !atLeast(info.MacOS, MinMacOS) {
		return info, fmt.Errorf("macOS %s is too old for tart: upgrade the host to macOS %s or later (System Settings > General > Software Update)", info.MacOS, MinMacOS)
	}
	switch {
	case !atLeast(info.MacOS, MinSuspendMacOS):
		info.NoSuspend = fmt.Sprintf("macOS %s cannot suspend VMs (macOS %s or later can): upgrade the host to suspend idle macOS sandboxes", info.MacOS, MinSuspendMacOS)
	case !atLeast(v, MinSuspendTart):
		info.NoSuspend = fmt.Sprintf("tart %s cannot suspend VMs (tart %s or later can): upgrade with `brew upgrade cirruslabs/cli/tart`", v, MinSuspendTart)
	}
	free, err := d.FreeDiskBytes(ctx)
	if err != nil {
		return info, fmt.Errorf("read the free disk space for tart's VMs: %w", err)
	}
	if minFreeGB > 0 && free < uint64(minFreeGB)<<30 {
		return info, fmt.Errorf("only %d GB free where tart keeps its VMs (%d GB needed): delete unused VMs (`tart list`, `tart delete NAME`, `tart prune --entries=caches`) or free disk space", free>>30, minFreeGB)
	}
	return info, nil
}

// atLeast compares dotted versions numerically.
func atLeast(v, min string) bool {
	a, b := strings.Split(strings.TrimPrefix(strings.Fields(v + " ")[0], "v"), "."), strings.Split(min, ".")
	for i := range b {
		var x, y int
		if i < len(a) {
			x, _ = strconv.Atoi(a[i])
		}
		y, _ = strconv.Atoi(b[i])
		if x != y {
			return x > y
		}
	}
	return true
}

// existingDir is where tart keeps VMs (dir: $TART_HOME, or ~/.tart when
// empty), or its nearest existing parent (a first run has not made it).
func existingDir(dir string) string {
	if dir == "" {
		h, _ := os.UserHomeDir()
		dir = filepath.Join(h, ".tart")
	}
	for {
		if _, err := os.Stat(dir); err == nil || dir == filepath.Dir(dir) {
			return dir
		}
		dir = filepath.Dir(dir)
	}
}
