package tart_test

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/providertest"
	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/control/provider/tart/agent"
	"github.com/sbxedge/sbx/internal/objstore"
	"github.com/sbxedge/sbx/internal/objstore/s3test"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

var (
	macdOnce sync.Once
	macdPath string
	macdErr  error
)

const agentToken = "internal-api-token-for-tests-0123"

// startAgent runs cmd/sbx-macd as its own process over the fake tart
// with its own TART_HOME, and returns a Driver speaking to it.
func startAgent(t *testing.T, env ...string) *agent.Client {
	t.Helper()
	return startAgentArgs(t, nil, env...)
}

// startAgentArgs is startAgent with more sbx-macd flags.
func startAgentArgs(t *testing.T, args []string, env ...string) *agent.Client {
	t.Helper()
	macdOnce.Do(func() {
		macdPath = filepath.Join(filepath.Dir(fakeTart), "sbx-macd")
		if out, err := exec.Command("go", "build", "-o", macdPath, "github.com/sbxedge/sbx/cmd/sbx-macd").CombinedOutput(); err != nil {
			macdErr = err
			t.Logf("%s", out)
		}
	})
	if macdErr != nil {
		t.Fatal(macdErr)
	}
	cmd := exec.Command(macdPath, append([]string{"--listen", "127.0.0.1:0", "--tart", fakeTart, "--min-free-gb", "0"}, args...)...)
	cmd.Env = append(append(append(os.Environ(), "SBX_MACD_TOKEN="+agentToken), fakeEnv(t)...), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("sbx-macd said %q, %v", line, err)
	}
	c := &agent.Client{BaseURL: "http://" + addr, Token: agentToken}
	// Its VMs are stopped before the agent (their supervisor) goes.
	t.Cleanup(func() { stopAll(t, c) })
	return c
}

// TestConformanceThroughAgent runs providertest against a provider whose
// one host is a host agent in its own process.
func TestConformanceThroughAgent(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Env {
		c := startAgent(t)
		p, _ := newProvider(t, tart.Config{Hosts: []tart.Host{{Name: "mini-1", Driver: c}}, Suspendable: true})
		return providertest.Env{Provider: p, Spec: macSpec}
	})
}

// TestAgentRefusesWithoutToken: no route of the agent answers without
// the internal-API token.
func TestAgentRefusesWithoutToken(t *testing.T) {
	c := startAgent(t)
	for _, tok := range []string{"", "wrong-token-wrong-token-wrong"} {
		bad := &agent.Client{BaseURL: c.BaseURL, Token: tok}
		if _, err := bad.List(context.Background()); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("List with token %q = %v; want 401", tok, err)
		}
	}
	if _, err := c.List(context.Background()); err != nil {
		t.Fatalf("List with the token: %v", err)
	}
}

// TestPlacementAcrossHosts: two agents, two slots each, hold four
// sandboxes, two on each; a fifth waits with the pool's counts.
func TestPlacementAcrossHosts(t *testing.T) {
	a, b := startAgent(t), startAgent(t)
	p, _ := newProvider(t, tart.Config{Hosts: []tart.Host{{Name: "mini-1", Driver: a}, {Name: "mini-2", Driver: b}}})
	sp := newSpecs(t)
	ctx := ctxFor(t, 3*time.Minute)
	var wg sync.WaitGroup
	for _, id := range []string{"sbx-p1", "sbx-p2", "sbx-p3", "sbx-p4"} {
		wg.Go(func() {
			if _, err := p.Provision(ctx, sp.spec(t, id)); err != nil {
				t.Errorf("Provision %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if na, nb := running(t, a), running(t, b); na != 2 || nb != 2 {
		t.Fatalf("running VMs per host = %d, %d; want 2, 2", na, nb)
	}
	msgs := make(chan string, 4)
	p.OnProgress(func(pr provider.Progress) { msgs <- pr.Message })
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := p.Provision(short, sp.spec(t, "sbx-p5")); err == nil {
		t.Fatal("a fifth sandbox got a slot on a full pool")
	}
	if got, want := <-msgs, "waiting for a macOS slot (4 of 4 in use on 2 hosts)"; got != want {
		t.Fatalf("progress %q, want %q", got, want)
	}
}

// TestAgentPreflightOfTheHostsMacOS: an agent on a macOS too old for tart
// exits at start saying what to do; one on macOS 13 serves, and control's
// provider, reading the host's version through it, exempts macOS
// sandboxes from idle suspend.
func TestAgentPreflightOfTheHostsMacOS(t *testing.T) {
	startAgent(t) // builds sbx-macd
	cmd := exec.Command(macdPath, "--listen", "127.0.0.1:0", "--tart", fakeTart, "--min-free-gb", "0")
	cmd.Env = append(append(os.Environ(), "SBX_MACD_TOKEN="+agentToken, "FAKETART_MACOS_VERSION=12.7"), fakeEnv(t)...)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "upgrade the host to macOS 13.0 or later") {
		t.Fatalf("sbx-macd on macOS 12.7: %v\n%s\nwant an exit that says to upgrade", err, out)
	}
	c := startAgent(t, "FAKETART_MACOS_VERSION=13.6")
	p, err := tart.New(tart.Config{Hosts: []tart.Host{{Name: "mini-13", Driver: c}}, Suspendable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Preflight(ctxFor(t, 30*time.Second), 0); err != nil {
		t.Fatal(err)
	}
	if p.CanSuspend(tart.PlatformMacOS) {
		t.Error("CanSuspend(macos) on a macOS 13.6 host through its agent; want false (exempt from idle suspend)")
	}
}

// TestAgentMovesBundles: a sandbox on a host agent whose driver has a
// BundleStore (here a directory, in this process; sbx-macd's is S3, see
// TestAgentMovesBundlesToS3) suspends into it, the VM gone from the host,
// and wakes with its files: control sends keys, the agent moves bytes.
func TestAgentMovesBundles(t *testing.T) {
	cli := tart.NewCLI(fakeTart, fakeEnv(t), nil)
	bundles := t.TempDir()
	srv := httptest.NewServer(agent.Handler(tart.WithBundles(cli, tart.DirBundles{Dir: bundles}), agentToken))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { stopAll(t, cli) })
	c := &agent.Client{BaseURL: srv.URL, Token: agentToken}
	p, _ := newProvider(t, tart.Config{Hosts: []tart.Host{{Name: "mini-1", Driver: c}}, Suspendable: true})
	sp := newSpecs(t)
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := p.Provision(ctx, sp.spec(t, "sbx-a1")); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(ctx, "sbx-sbx-a1", nil, "sh", "-c", "echo kept > kept.txt"); err != nil || res.ExitCode != 0 {
		t.Fatalf("write: %+v %v", res, err)
	}
	if err := p.Suspend(ctx, "sbx-a1"); err != nil {
		t.Fatal(err)
	}
	if vms, _ := c.List(ctx); slices.ContainsFunc(vms, func(vm tart.VM) bool { return vm.Name == "sbx-sbx-a1" }) {
		t.Fatal("suspended VM still on the host")
	}
	if fi, err := os.Stat(filepath.Join(bundles, "macos-bundles", "sbx-a1.tvm")); err != nil || fi.Size() < 4<<20 {
		t.Fatalf("bundle: %v, %v; want one holding the VM's memory", fi, err)
	}
	if in, err := p.Status(ctx, "sbx-a1"); err != nil || in.Phase != provider.PhaseStopped {
		t.Fatalf("Status of the offloaded sandbox = %+v, %v; want stopped", in, err)
	}
	if _, err := p.Restore(ctx, sp.spec(t, "sbx-a1")); err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(ctx, "sbx-sbx-a1", nil, "cat", "kept.txt")
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "kept" {
		t.Fatalf("after wake: %q %v", res.Stdout, err)
	}
	if ok, _ := c.BundleExists(ctx, "macos-bundles/sbx-a1.tvm"); ok {
		t.Fatal("bundle kept after the wake")
	}
	if err := c.StoreBundle(ctx, "no-such-vm", "macos-bundles/x.tvm"); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("StoreBundle of a VM that is not there = %v; want tart's refusal", err)
	}
}

// TestAgentWithoutObjectStorage: an agent started with no --s3-endpoint,
// asked to offload, keeps the suspended VM on its disk: the suspend
// stands, the sandbox wakes from the Mac's disk, and control's log names
// the host that lacks object storage.
func TestAgentWithoutObjectStorage(t *testing.T) {
	c := startAgent(t)
	var logs sshscenario.SyncBuffer
	p, _ := newProvider(t, tart.Config{Hosts: []tart.Host{{Name: "mini-1", Driver: c}}, Suspendable: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	sp := newSpecs(t)
	ctx := ctxFor(t, 2*time.Minute)
	if _, err := p.Provision(ctx, sp.spec(t, "sbx-n1")); err != nil {
		t.Fatal(err)
	}
	if err := p.Suspend(ctx, "sbx-n1"); err != nil {
		t.Fatalf("Suspend on a host without object storage: %v; want the VM kept suspended on its disk", err)
	}
	vms, _ := c.List(ctx)
	if !slices.ContainsFunc(vms, func(vm tart.VM) bool { return vm.Name == "sbx-sbx-n1" && vm.State == "suspended" }) {
		t.Fatalf("VMs %+v; want sbx-sbx-n1 suspended on the host", vms)
	}
	if l := logs.String(); !strings.Contains(l, "host=mini-1") || !strings.Contains(l, "no object storage") || !strings.Contains(l, "--s3-endpoint") {
		t.Errorf("log %q; want it to name mini-1 as lacking object storage and the flag that gives it", l)
	}
	if err := c.StoreBundle(ctx, "sbx-sbx-n1", "macos-bundles/sbx-n1.tvm"); !errors.Is(err, tart.ErrNoBundleStore) {
		t.Errorf("StoreBundle on the agent = %v; want ErrNoBundleStore", err)
	}
	if _, err := p.Restore(ctx, sp.spec(t, "sbx-n1")); err != nil {
		t.Fatal(err)
	}
}

// TestAgentMovesBundlesToS3: sbx-macd, its own process with --s3-*
// flags (the secret from a file, the access key from the environment),
// uploads a suspended VM's bundle to a real S3 server (weed) itself and
// loads it back on wake; destroying a suspended sandbox deletes it.
func TestAgentMovesBundlesToS3(t *testing.T) {
	s3 := s3test.New(t)
	bucket := s3test.Bucket("macd-bundles")
	secretFile := filepath.Join(t.TempDir(), "s3-secret")
	if err := os.WriteFile(secretFile, []byte(s3.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startAgentArgs(t, []string{"--s3-endpoint", "http://" + s3.Endpoint, "--s3-bucket", bucket, "--s3-secret-key-file", secretFile},
		"AWS_ACCESS_KEY_ID="+s3.AccessKey, "AWS_SECRET_ACCESS_KEY=")
	p, _ := newProvider(t, tart.Config{Hosts: []tart.Host{{Name: "mini-1", Driver: c}}, Suspendable: true})
	store, err := objstore.New(s3.Config(bucket))
	if err != nil {
		t.Fatal(err)
	}
	sp := newSpecs(t)
	ctx := ctxFor(t, 3*time.Minute)
	stored := func(id string) bool {
		t.Helper()
		_, err := store.Stat(ctx, "macos-bundles/"+id+".tvm")
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	for _, id := range []string{"sbx-b1", "sbx-b2"} {
		if _, err := p.Provision(ctx, sp.spec(t, id)); err != nil {
			t.Fatal(err)
		}
		if err := p.Suspend(ctx, id); err != nil {
			t.Fatal(err)
		}
		if !stored(id) {
			t.Fatalf("no bundle of %s in the bucket after its suspend", id)
		}
	}
	if vms, _ := c.List(ctx); slices.ContainsFunc(vms, func(vm tart.VM) bool { return strings.HasPrefix(vm.Name, "sbx-sbx-b") }) {
		t.Fatalf("suspended VMs still on the host: %+v", vms)
	}
	if _, err := p.Restore(ctx, sp.spec(t, "sbx-b1")); err != nil {
		t.Fatal(err)
	}
	if res, err := c.Exec(ctx, "sbx-sbx-b1", nil, "true"); err != nil || res.ExitCode != 0 {
		t.Fatalf("after wake: %+v %v", res, err)
	}
	if stored("sbx-b1") {
		t.Error("bundle of sbx-b1 kept after its wake")
	}
	if err := p.Destroy(ctx, "sbx-b2"); err != nil {
		t.Fatal(err)
	}
	if stored("sbx-b2") {
		t.Error("bundle of sbx-b2 kept after its destroy")
	}
}

// TestAgentS3FlagsAtStart: an agent given --s3-endpoint without keys
// exits at start naming the flags, before it serves anything.
func TestAgentS3FlagsAtStart(t *testing.T) {
	startAgent(t) // builds sbx-macd
	cmd := exec.Command(macdPath, "--listen", "127.0.0.1:0", "--tart", fakeTart, "--min-free-gb", "0", "--s3-endpoint", "http://127.0.0.1:1")
	cmd.Env = append(append(os.Environ(), "SBX_MACD_TOKEN="+agentToken, "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="), fakeEnv(t)...)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--s3-access-key-file") || strings.Contains(string(out), "listening on") {
		t.Fatalf("sbx-macd --s3-endpoint without keys: %v\n%s\nwant an exit naming --s3-access-key-file", err, out)
	}
}

// TestAgentTemplatesListAndPrune: templates listed through an agent say
// which profile builds them (base image, script hash); PruneUnused, what
// `sbx admin templates prune` runs beside a live control, deletes an old
// template, never the current one nor a build in progress.
func TestAgentTemplatesListAndPrune(t *testing.T) {
	c := startAgent(t)
	ctx := ctxFor(t, 2*time.Minute)
	sp := newSpecs(t)
	mk := func(script string) *tart.Provider {
		p, _ := newProvider(t, tart.Config{Hosts: []tart.Host{{Name: "mini-1", Driver: c}},
			Templates: map[string]tart.Template{"macos-test": {BaseImage: baseImage, SetupScript: script}}})
		return p
	}
	old := mk("echo v1 > template.txt\n")
	if _, err := old.Provision(ctx, sp.spec(t, "sbx-t1")); err != nil {
		t.Fatal(err)
	}
	p := mk("echo v2 > template.txt\n")
	if _, err := p.Provision(ctx, sp.spec(t, "sbx-t2")); err != nil {
		t.Fatal(err)
	}
	if err := c.Clone(ctx, baseImage, "sbxtpl-00000000000000ff-build"); err != nil {
		t.Fatal(err)
	}
	list, err := p.Templates(ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("Templates = %+v, %v; want old, current and a build", list, err)
	}
	cur := tart.TemplateName(tart.Template{BaseImage: baseImage, SetupScript: "echo v2 > template.txt\n"})
	for _, tpl := range list {
		switch {
		case tpl.Name == cur:
			if !tpl.Current || tpl.BaseImage != baseImage || len(tpl.ScriptSHA256) != 64 || !slices.Equal(tpl.Profiles, []string{"macos-test"}) {
				t.Errorf("current template %+v; want its profile, base and script hash", tpl)
			}
		case strings.HasSuffix(tpl.Name, "-build"):
			if !tpl.Building {
				t.Errorf("%+v: want Building", tpl)
			}
		case tpl.Current || tpl.BaseImage != "":
			t.Errorf("old template %+v: want not current, inputs unknown", tpl)
		}
	}
	pruned, err := p.PruneUnused(ctx)
	oldName := tart.TemplateName(tart.Template{BaseImage: baseImage, SetupScript: "echo v1 > template.txt\n"})
	if err != nil || !slices.Equal(pruned, []string{"mini-1/" + oldName}) {
		t.Fatalf("PruneUnused = %v, %v; want only %s", pruned, err, oldName)
	}
	for _, id := range []string{"sbx-t1", "sbx-t2"} {
		if res, err := c.Exec(ctx, "sbx-"+id, nil, "true"); err != nil || res.ExitCode != 0 {
			t.Errorf("%s after the prune: %+v %v; a clone is its own copy", id, res, err)
		}
	}
	bad := &agent.Client{BaseURL: c.BaseURL, Token: "not-the-agents-token-0000"}
	if _, err := bad.List(ctx); err == nil || !strings.Contains(err.Error(), "SBX_MACD_TOKEN") {
		t.Errorf("List with a wrong token = %v; want the refusal to say which token", err)
	}
}
