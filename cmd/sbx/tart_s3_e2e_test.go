package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/internal/objstore"
	"github.com/sbxedge/sbx/internal/objstore/s3test"
)

// TestMacOSSuspendToS3ThroughDev: `sbx dev --tart --s3-endpoint` on the
// fake tart and a real weed server. Suspending a macOS sandbox uploads
// its VM's bundle to the bucket and removes the VM from the host; waking
// it brings the VM back with the file written before the suspend; and
// destroying a suspended one deletes its bundle.
func TestMacOSSuspendToS3ThroughDev(t *testing.T) {
	srv := s3test.New(t)
	tartBin := fakeTartBinary(t)
	dir := t.TempDir()
	bucket := s3test.Bucket("dev-bundles")
	env := fakeTartEnv(t, tartBin, dir)
	// The secret reaches sbx dev through its file flag, the access key
	// through the variable: neither is a flag's value.
	secretFile := filepath.Join(dir, "s3-secret")
	if err := os.WriteFile(secretFile, []byte(srv.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	devEnv := append([]string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY="}, env...)
	p := startDevEnv(t, devEnv, filepath.Join(dir, "data"), "", "--tart", tartBin,
		"--s3-endpoint", "http://"+srv.Endpoint, "--s3-bucket", bucket, "--s3-secret-key-file", secretFile)

	// The test's own client of the bucket; its connections end with it.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg := srv.Config(bucket)
	cfg.Transport = tr
	store, err := objstore.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stored := func(key string) bool {
		t.Helper()
		_, err := store.Stat(ctx, key)
		if err != nil && !errors.Is(err, objstore.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	sandboxVMs := func() []string {
		var names []string
		for _, vm := range tartVMs(t, tartBin, env) {
			if strings.HasPrefix(vm.Name, "sbx-") {
				names = append(names, vm.Name)
			}
		}
		return names
	}

	var sb sbView
	if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": devseed.MacOSProfiles[0].Name}, &sb); code != 201 {
		t.Fatalf("create: %d", code)
	}
	id := sb.ID
	p.waitStatus(id, "ready", 2*time.Minute)
	vms := sandboxVMs()
	if len(vms) != 1 {
		t.Fatalf("sandbox VMs %v; want one", vms)
	}
	key := "macos-bundles/" + strings.TrimPrefix(vms[0], "sbx-") + ".tvm"
	if code := p.putFile(id, "notes/kept.txt", "written before the suspend\n"); code != 201 {
		t.Fatalf("PUT file: %d", code)
	}

	suspend := func() {
		t.Helper()
		if code := p.call("POST", "/api/v1/sandboxes/"+id+"/suspend", nil, nil); code != 200 && code != 202 {
			t.Fatalf("suspend: %d", code)
		}
		p.waitStatus(id, "suspended", 2*time.Minute)
		if !stored(key) {
			t.Fatalf("no %s in bucket %s after the suspend", key, bucket)
		}
		if vms := sandboxVMs(); len(vms) != 0 {
			t.Fatalf("tart list still has %v after the suspend; want the VM moved off the host", vms)
		}
	}
	suspend()

	// Wake with the API's resume (`sbx start`); 503 sandbox_waking means
	// the restore goes on past the server's hold.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code := p.call("POST", "/api/v1/sandboxes/"+id+"/resume", nil, nil)
		if code == 200 {
			break
		}
		if code != 503 || time.Now().After(deadline) {
			t.Fatalf("resume: %d", code)
		}
		time.Sleep(time.Second)
	}
	var ex execResult
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": "cat notes/kept.txt"}, &ex); code != 200 || ex.ExitCode != 0 {
		t.Fatalf("exec after wake: %d %+v", code, ex)
	}
	if ex.Stdout != "written before the suspend\n" {
		t.Fatalf("after the wake the file reads %q", ex.Stdout)
	}
	if vms := sandboxVMs(); len(vms) != 1 {
		t.Fatalf("sandbox VMs after the wake: %v; want it back", vms)
	}
	if stored(key) {
		t.Fatalf("%s still in the bucket after the wake", key)
	}

	// Destroying a suspended sandbox deletes its bundle.
	suspend()
	deadline = time.Now().Add(time.Minute)
	if code := p.call("DELETE", "/api/v1/sandboxes/"+id, nil, nil); code >= 300 {
		t.Fatalf("destroy: %d", code)
	}
	for stored(key) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still in the bucket after the destroy", key)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p.stop()
}
