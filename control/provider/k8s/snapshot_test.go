package k8s_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// TestSnapshotForkRestore runs the checkpoint flow against the real
// kube-apiserver: a snapshot is a VolumeSnapshot of the running pod's
// workspace PVC that carries no sandbox label (so it outlives the
// sandbox); an in-place restore gives the sandbox a new PVC whose data
// source is that VolumeSnapshot, bound by the test kubelet to a copy, and
// the file is back; two forks get PVCs from it too, with the file; the
// snapshot survives its sandbox's delete, and its own delete removes it.
func TestSnapshotForkRestore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	r := newReplica(t, e, testdb.Postgres(t), false, true)
	sb := create(t, r.m, "tuist-linux-medium")
	sb = waitState(t, r.st, sb.ID, store.StateReady)
	notes := func(sb store.Sandbox) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(sb.Workspace, "notes.txt"))
		if err != nil {
			t.Fatalf("notes of %s: %v", sb.ID, err)
		}
		return string(b)
	}
	if err := os.WriteFile(filepath.Join(sb.Workspace, "notes.txt"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}

	snap, err := r.m.TakeSnapshot(ctx, testAccount, sb.ID, lifecycle.SnapshotRequest{Name: "before"})
	if err != nil || snap.State != store.SnapshotReady {
		t.Fatalf("snapshot: %+v, %v; want ready", snap, err)
	}
	vs := e.dyn.Resource(k8s.SnapshotGVR).Namespace(e.ns)
	obj, err := vs.Get(ctx, snap.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("VolumeSnapshot %s: %v", snap.ID, err)
	}
	src, _, _ := unstructured.NestedString(obj.Object, "spec", "source", "persistentVolumeClaimName")
	ready, _, _ := unstructured.NestedBool(obj.Object, "status", "readyToUse")
	if src != sb.ID+"-ws" || !ready || obj.GetLabels()[k8s.LabelSandbox] != "" || obj.GetLabels()[k8s.LabelSnapshotOf] != sb.ID {
		t.Fatalf("VolumeSnapshot source %q ready %v labels %v", src, ready, obj.GetLabels())
	}
	if cur, _ := r.st.Sandbox(ctx, sb.ID); cur.State != store.StateReady {
		t.Fatalf("sandbox %s while snapshotted; want it kept ready", cur.State)
	}

	if err := os.WriteFile(filepath.Join(sb.Workspace, "notes.txt"), []byte("broken"), 0o644); err != nil {
		t.Fatal(err)
	}
	back, err := r.m.RestoreSnapshot(ctx, testAccount, sb.ID, snap.ID)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	pvc, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, sb.ID+"-ws", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds := pvc.Spec.DataSource; ds == nil || ds.Kind != "VolumeSnapshot" || ds.Name != snap.ID {
		t.Fatalf("restored PVC data source %+v; want VolumeSnapshot %s", pvc.Spec.DataSource, snap.ID)
	}
	if got := notes(back); got != "precious" {
		t.Fatalf("notes after restore %q", got)
	}
	if err := lifecycle.CheckLedger(back, mustSessions(t, r.st, sb.ID)); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		f, _, err := r.m.Create(ctx, testAccount, lifecycle.CreateRequest{FromSnapshot: snap.ID})
		if err != nil {
			t.Fatalf("fork: %v", err)
		}
		f = waitState(t, r.st, f.ID, store.StateReady)
		fpvc, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, f.ID+"-ws", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ds := fpvc.Spec.DataSource; ds == nil || ds.Name != snap.ID {
			t.Fatalf("fork PVC data source %+v; want %s", fpvc.Spec.DataSource, snap.ID)
		}
		if got := notes(f); got != "precious" {
			t.Fatalf("notes of fork %s %q", f.ID, got)
		}
	}

	if _, err := r.m.Delete(ctx, testAccount, sb.ID); err != nil {
		t.Fatal(err)
	}
	waitState(t, r.st, sb.ID, store.StateTerminated)
	if _, err := vs.Get(ctx, snap.ID, metav1.GetOptions{}); err != nil {
		t.Fatalf("VolumeSnapshot after its sandbox's delete: %v; want kept", err)
	}
	if _, err := r.m.DeleteSnapshot(ctx, testAccount, snap.ID); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := vs.Get(ctx, snap.ID, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("VolumeSnapshot still there after delete: %v", err)
		}
	}
	if _, _, err := r.m.Create(ctx, testAccount, lifecycle.CreateRequest{FromSnapshot: snap.ID}); !errors.Is(err, lifecycle.ErrInvalid) {
		t.Fatalf("fork of a deleted snapshot: %v; want invalid", err)
	}
}

func mustSessions(t *testing.T, st store.Store, id string) []store.Session {
	t.Helper()
	ss, err := st.Sessions(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return ss
}
