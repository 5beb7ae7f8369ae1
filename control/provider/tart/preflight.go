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

// Preflight checks every host: tart answers, is recent enough, and its
// disk has room. Errors say what to do.
func (p *Provider) Preflight(ctx context.Context, minFreeGB int) error {
	var errs []error
	for _, h := range p.hosts {
		if err := Preflight(ctx, h.driver, minFreeGB); err != nil {
			errs = append(errs, fmt.Errorf("host %s: %w", h.name, err))
		}
	}
	return errors.Join(errs...)
}

// Preflight checks one host's driver.
func Preflight(ctx context.Context, d Driver, minFreeGB int) error {
	v, err := d.Version(ctx)
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("tart is not installed or not executable (%w): install it with `brew install cirruslabs/cli/tart`, or name the binary with --tart PATH / SBX_TART", err)
		}
		return fmt.Errorf("`tart --version` failed: %w; check the tart installation", err)
	}
	if !atLeast(v, MinVersion) {
		return fmt.Errorf("tart %s is too old: %s or later is needed for `tart exec`; upgrade with `brew upgrade cirruslabs/cli/tart`", v, MinVersion)
	}
	free, err := d.FreeDiskBytes(ctx)
	if err != nil {
		return fmt.Errorf("read the free disk space for tart's VMs: %w", err)
	}
	if minFreeGB > 0 && free < uint64(minFreeGB)<<30 {
		return fmt.Errorf("only %d GB free where tart keeps its VMs (%d GB needed): delete unused VMs (`tart list`, `tart delete NAME`, `tart prune --entries=caches`) or free disk space", free>>30, minFreeGB)
	}
	return nil
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
