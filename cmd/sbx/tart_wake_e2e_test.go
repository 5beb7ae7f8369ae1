package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/devseed"
)

// TestMacOSWakesOnSSH: `sbx dev --tart` on the fake tart. A suspended
// macOS sandbox (its VM suspended, its slot free) is woken by traffic: an
// OpenSSH connection through the edge is held while the VM resumes and
// then runs its command in the guest, which still has the file written
// before the suspend.
func TestMacOSWakesOnSSH(t *testing.T) {
	tartBin := fakeTartBinary(t)
	dir := t.TempDir()
	env := fakeTartEnv(t, tartBin, dir)
	p := startDevEnv(t, env, filepath.Join(dir, "data"), "", "--tart", tartBin)
	var sb sbView
	if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": devseed.MacOSProfiles[0].Name}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	id := sb.ID
	p.waitStatus(id, "ready", 2*time.Minute)
	if code := p.putFile(id, "notes/kept.txt", "written before the suspend\n"); code != 201 {
		t.Fatalf("PUT file: %d", code)
	}
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/suspend", nil, nil); code != 200 && code != 202 {
		t.Fatalf("suspend: %d", code)
	}
	p.waitStatus(id, "suspended", 2*time.Minute)
	for _, vm := range tartVMs(t, tartBin, env) {
		if strings.HasPrefix(vm.Name, "sbx-") && vm.Running {
			t.Fatalf("VM %s still running after the suspend", vm.Name)
		}
	}
	ta := mint(t, p, id, dir)
	out, errOut, code := runTool(t, "", "ssh", append(ta.opts("-p"), ta.dest(), `cat "$HOME/notes/kept.txt"`)...)
	if out != "written before the suspend\n" || code != 0 {
		t.Fatalf("ssh to the suspended sandbox: stdout %q stderr %q exit %d", out, errOut, code)
	}
	if got := p.waitStatus(id, "ready", 10*time.Second); got.Status != "ready" {
		t.Fatalf("after the ssh the sandbox is %s", got.Status)
	}
	p.stop()
}
