package tart_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbxedge/sbx/auth/hostkey"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/tart"
)

// specs makes provider specs with real host keys and a CA.
type specs struct {
	ca   *sshca.CA
	keys *hostkey.Deriver
}

func newSpecs(t *testing.T) *specs {
	t.Helper()
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := hostkey.New([]byte("tart-test-secret-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	return &specs{ca: ca, keys: keys}
}

func (s *specs) spec(t *testing.T, id string) provider.Spec {
	t.Helper()
	priv, _, err := s.keys.Key(id)
	if err != nil {
		t.Fatal(err)
	}
	return macSpec(provider.Spec{SandboxID: id, AccountID: "acct-test", HostKeyPEM: priv, UserCAKey: s.ca.AuthorizedKey()})
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func running(t *testing.T, d tart.Driver) int {
	t.Helper()
	vms, err := d.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, vm := range vms {
		if vm.Running {
			n++
		}
	}
	return n
}

// TestThirdCreateWaitsForASlot: on a one-host pool a third concurrent
// create is held with the slot message, never makes a third VM run, and
// becomes ready when one of the first two is destroyed.
func TestThirdCreateWaitsForASlot(t *testing.T) {
	p, cli := newProvider(t, tart.Config{})
	sp := newSpecs(t)
	ctx := ctxFor(t, 2*time.Minute)
	var mu sync.Mutex
	var msgs []string
	p.OnProgress(func(pr provider.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if pr.SandboxID == "sbx-c" {
			msgs = append(msgs, pr.Message)
		}
	})
	for _, id := range []string{"sbx-a", "sbx-b"} {
		if _, err := p.Provision(ctx, sp.spec(t, id)); err != nil {
			t.Fatalf("Provision %s: %v", id, err)
		}
	}
	// A watcher that fails the test if tart ever runs three VMs.
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if n := running(t, cli); n > 2 {
				t.Errorf("%d VMs running: the licence allows 2", n)
			}
		}
	})
	defer func() { close(stop); watch.Wait() }()

	done := make(chan error, 1)
	go func() {
		_, err := p.Provision(ctx, sp.spec(t, "sbx-c"))
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(msgs)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the third create reported no wait")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	if want := "waiting for a macOS slot (2 of 2 in use on 1 host)"; msgs[0] != want {
		t.Fatalf("progress = %q, want %q", msgs[0], want)
	}
	mu.Unlock()
	select {
	case err := <-done:
		t.Fatalf("third create finished while both slots were taken: %v", err)
	case <-time.After(time.Second):
	}
	if err := p.Destroy(ctx, "sbx-a"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("third create after a slot freed: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("third create still waiting after a slot freed")
	}
	if in, err := p.Status(ctx, "sbx-c"); err != nil || in.Phase != provider.PhaseRunning {
		t.Fatalf("Status(sbx-c) = %+v, %v; want running", in, err)
	}
}

// TestWaitEndsAtTheProvisioningTimeout: a create that never gets a slot
// fails when its context (the job's provisioning timeout) ends.
func TestWaitEndsAtTheProvisioningTimeout(t *testing.T) {
	p, _ := newProvider(t, tart.Config{Hosts: nil})
	sp := newSpecs(t)
	ctx := ctxFor(t, time.Minute)
	for _, id := range []string{"sbx-a", "sbx-b"} {
		if _, err := p.Provision(ctx, sp.spec(t, id)); err != nil {
			t.Fatal(err)
		}
	}
	short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	_, err := p.Provision(short, sp.spec(t, "sbx-c"))
	if err == nil || !strings.Contains(err.Error(), "no macOS slot came free (2 of 2 in use on 1 host)") {
		t.Fatalf("Provision = %v; want the slot timeout", err)
	}
	if _, err := p.Status(ctx, "sbx-c"); err == nil {
		t.Fatal("a create that timed out left a VM")
	}
}

// TestTemplateBuiltOnceAndRebuiltOnChange: two creates of a profile share
// one template build; a changed setup script builds a new template, and
// the old one is pruned.
func TestTemplateBuiltOnceAndRebuiltOnChange(t *testing.T) {
	env := fakeEnv(t)
	cli := tart.NewCLI(fakeTart, env, nil)
	t.Cleanup(func() { stopAll(t, cli) })
	sp := newSpecs(t)
	ctx := ctxFor(t, 2*time.Minute)
	mk := func(script string) *tart.Provider {
		p, err := tart.New(tart.Config{
			Hosts:     []tart.Host{{Name: "mac-1", Driver: cli}},
			Templates: map[string]tart.Template{"macos-test": {BaseImage: baseImage, SetupScript: script}},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	p := mk("echo v1 > template.txt\n")
	var wg sync.WaitGroup
	for _, id := range []string{"sbx-one", "sbx-two"} {
		wg.Go(func() {
			if _, err := p.Provision(ctx, sp.spec(t, id)); err != nil {
				t.Errorf("Provision %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	if n := p.TemplateBuilds(); n != 1 {
		t.Fatalf("template builds for two creates = %d, want 1", n)
	}
	res, err := cli.Exec(ctx, "sbx-sbx-two", nil, "cat", "template.txt")
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "v1" {
		t.Fatalf("the setup script's file in a sandbox: %q, %v", res.Stdout, err)
	}
	for _, id := range []string{"sbx-one", "sbx-two"} {
		if err := p.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	p2 := mk("echo v2 > template.txt\n")
	if _, err := p2.Provision(ctx, sp.spec(t, "sbx-three")); err != nil {
		t.Fatal(err)
	}
	if n := p2.TemplateBuilds(); n != 1 {
		t.Fatalf("builds after the script changed = %d, want 1", n)
	}
	res, _ = cli.Exec(ctx, "sbx-sbx-three", nil, "cat", "template.txt")
	if got := strings.TrimSpace(string(res.Stdout)); got != "v2" {
		t.Fatalf("template.txt after the change = %q, want v2", got)
	}
	tpls, err := p2.Templates(ctx)
	if err != nil || len(tpls) != 2 {
		t.Fatalf("Templates = %+v, %v; want the old and the new", tpls, err)
	}
	pruned, err := p2.PruneTemplates(ctx)
	if err != nil || len(pruned) != 1 || !strings.HasSuffix(pruned[0], tart.TemplateName(tart.Template{BaseImage: baseImage, SetupScript: "echo v1 > template.txt\n"})) {
		t.Fatalf("PruneTemplates = %v, %v; want the v1 template", pruned, err)
	}
	if got, _ := cli.Exec(ctx, "sbx-sbx-three", nil, "true"); got.ExitCode != 0 {
		t.Fatal("the sandbox cloned from the new template broke")
	}
}

// TestVMThatDiesIsReportedAsAStop: a `tart run` killed under a ready
// sandbox is a stop with reason guest_crash, and Status says failed.
func TestVMThatDiesIsReportedAsAStop(t *testing.T) {
	p, _ := newProvider(t, tart.Config{})
	sp := newSpecs(t)
	ctx := ctxFor(t, time.Minute)
	stops := make(chan provider.Stop, 1)
	p.OnStop(func(s provider.Stop) { stops <- s })
	if _, err := p.Provision(ctx, sp.spec(t, "sbx-crash")); err != nil {
		t.Fatal(err)
	}
	pid := runPID(t, "sbx-sbx-crash")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-stops:
		if s.SandboxID != "sbx-crash" || s.Reason != "guest_crash" || s.At.IsZero() {
			t.Fatalf("stop = %+v", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no stop reported for a VM that died")
	}
	if in, err := p.Status(ctx, "sbx-crash"); err != nil || in.Phase != provider.PhaseFailed || in.Reason != "guest_crash" {
		t.Fatalf("Status = %+v, %v; want failed/guest_crash", in, err)
	}
	// A destroy of it still cleans up, and a stop we ask for is no crash.
	if err := p.Destroy(ctx, "sbx-crash"); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-stops:
		t.Fatalf("destroy reported a stop: %+v", s)
	case <-time.After(300 * time.Millisecond):
	}
}

// runPID finds the fake's `tart run` process of vm under any test's
// TART_HOME: the newest run.pid of that name.
func runPID(t *testing.T, vm string) int {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), "Test*", "*", "vms", vm, "run.pid"))
	var newest string
	var at time.Time
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.ModTime().After(at) {
			newest, at = m, fi.ModTime()
		}
	}
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatalf("run.pid of %s: %v", vm, err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// TestFits: a shape larger than every host is refused up front.
func TestFits(t *testing.T) {
	cli := tart.NewCLI(fakeTart, fakeEnv(t), nil)
	p, err := tart.New(tart.Config{Hosts: []tart.Host{{Name: "mini", Driver: cli, MaxMemoryMB: 16384, MaxCPU: 8}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		shape provider.Shape
		ok    bool
	}{
		{provider.Shape{Platform: "macos", CPU: 4, MemoryMB: 8192}, true},
		{provider.Shape{Platform: "macos", CPU: 4, MemoryMB: 32768}, false},
		{provider.Shape{Platform: "macos", CPU: 12, MemoryMB: 8192}, false},
		{provider.Shape{Platform: "linux", CPU: 1, MemoryMB: 1024}, false},
	} {
		if err := p.Fits(tc.shape); (err == nil) != tc.ok {
			t.Errorf("Fits(%+v) = %v; want ok=%v", tc.shape, err, tc.ok)
		}
	}
}

// TestPreflight: errors say what to do.
func TestPreflight(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	for _, tc := range []struct {
		name, path, swVers string
		env                []string
		want               string
	}{
		{"missing", "/nonexistent/tart", "", nil, "brew install cirruslabs/cli/tart"},
		{"old", fakeTart, "", []string{"FAKETART_VERSION=1.6.0"}, "tart 1.6.0 is too old"},
		{"not a Mac", fakeTart, "/nonexistent/sw_vers", nil, "tart runs only on macOS"},
		{"old macOS", fakeTart, "", []string{"FAKETART_MACOS_VERSION=12.7.4"}, "upgrade the host to macOS 13.0 or later"},
		{"ok", fakeTart, "", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tart.NewCLI(tc.path, append(fakeEnv(t), tc.env...), nil)
			d.SwVers = tc.swVers
			_, err := tart.Preflight(ctx, d, 0)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Preflight = %v; want %q", err, tc.want)
			}
		})
	}
	d := tart.NewCLI(fakeTart, fakeEnv(t), nil)
	if _, err := tart.Preflight(ctx, d, 1<<20); err == nil || !strings.Contains(err.Error(), "tart delete") {
		t.Fatalf("Preflight wanting 1 PB free = %v; want the disk advice", err)
	}
}

// TestPreflightExemptsHostsThatCannotSuspend: a macOS 13 host passes
// preflight, says why it cannot suspend, and the provider then reports
// macOS sandboxes as not suspendable (exempt from idle suspend) and
// refuses Suspend; a macOS 15 host suspends.
func TestPreflightExemptsHostsThatCannotSuspend(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	for _, tc := range []struct {
		macOS   string
		suspend bool
	}{{"13.6.1", false}, {"15.1", true}} {
		d := tart.NewCLI(fakeTart, append(fakeEnv(t), "FAKETART_MACOS_VERSION="+tc.macOS), nil)
		info, err := tart.Preflight(ctx, d, 0)
		if err != nil || info.MacOS != tc.macOS || (info.NoSuspend == "") != tc.suspend {
			t.Fatalf("macOS %s: Preflight = %+v, %v; want suspend=%v", tc.macOS, info, err, tc.suspend)
		}
		if !tc.suspend && !strings.Contains(info.NoSuspend, "macOS 14.0 or later") {
			t.Errorf("NoSuspend %q; want it to name macOS 14", info.NoSuspend)
		}
		p, err := tart.New(tart.Config{Hosts: []tart.Host{{Name: "mini", Driver: d}}, Suspendable: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Preflight(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := p.CanSuspend(tart.PlatformMacOS); got != tc.suspend {
			t.Errorf("macOS %s: CanSuspend = %v; want %v", tc.macOS, got, tc.suspend)
		}
		if !tc.suspend {
			if err := p.Suspend(ctx, "sb-1"); !errors.Is(err, provider.ErrSuspendUnsupported) {
				t.Errorf("Suspend on macOS %s = %v; want ErrSuspendUnsupported", tc.macOS, err)
			}
		}
		_ = p.Close()
	}
}

// TestSuspendOffloadsAndFreesTheSlot: a suspended VM leaves the host
// (its bundle, memory included, in the BundleStore), its slot serves
// another sandbox, and it resumes with its files when a slot frees.
func TestSuspendOffloadsAndFreesTheSlot(t *testing.T) {
	bundles := t.TempDir()
	p, cli := newProviderWith(t, tart.Config{Suspendable: true}, tart.DirBundles{Dir: bundles})
	sp := newSpecs(t)
	ctx := ctxFor(t, 2*time.Minute)
	for _, id := range []string{"sbx-s1", "sbx-s2"} {
		if _, err := p.Provision(ctx, sp.spec(t, id)); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := cli.Exec(ctx, "sbx-sbx-s1", nil, "sh", "-c", "echo kept > kept.txt"); err != nil || res.ExitCode != 0 {
		t.Fatalf("write: %+v %v", res, err)
	}
	if err := p.Suspend(ctx, "sbx-s1"); err != nil {
		t.Fatal(err)
	}
	vms, _ := cli.List(ctx)
	for _, vm := range vms {
		if vm.Name == "sbx-sbx-s1" {
			t.Fatalf("suspended VM still on the host: %+v", vm)
		}
	}
	fi, err := os.Stat(filepath.Join(bundles, "macos-bundles", "sbx-s1.tvm"))
	// 4096 MB at FAKETART_STATE_SCALE=0.001: the state is ~4 MB of the bundle.
	if err != nil || fi.Size() < 4<<20 {
		t.Fatalf("bundle: %v, %v; want one holding the VM's memory", fi, err)
	}
	if _, err := p.Provision(ctx, sp.spec(t, "sbx-s3")); err != nil {
		t.Fatalf("the freed slot: %v", err)
	}
	if err := p.Destroy(ctx, "sbx-s2"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Restore(ctx, sp.spec(t, "sbx-s1")); err != nil {
		t.Fatal(err)
	}
	res, err := cli.Exec(ctx, "sbx-sbx-s1", nil, "cat", "kept.txt")
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "kept" {
		t.Fatalf("after wake: %q %v", res.Stdout, err)
	}
	if ok, _ := (tart.DirBundles{Dir: bundles}).Exists(ctx, "macos-bundles/sbx-s1.tvm"); ok {
		t.Fatal("bundle kept after the wake")
	}
}
