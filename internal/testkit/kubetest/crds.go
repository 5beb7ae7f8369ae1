package kubetest

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

//go:embed crds/*.yaml
var crdFiles embed.FS

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// installCRDs creates the CRDs in crds/ and waits until each is
// Established (served).
func installCRDs(ctx context.Context, dyn dynamic.Interface) error {
	objs, err := crdObjects()
	if err != nil {
		return err
	}
	res := dyn.Resource(crdGVR)
	for _, o := range objs {
		if _, err := res.Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("kubetest: create CRD %s: %w", o.GetName(), err)
		}
	}
	for _, o := range objs {
		if err := waitEstablished(ctx, res, o.GetName()); err != nil {
			return err
		}
	}
	return nil
}

func crdObjects() ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	err := fs.WalkDir(crdFiles, "crds", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := crdFiles.ReadFile(path)
		if err != nil {
			return err
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if m != nil {
				objs = append(objs, &unstructured.Unstructured{Object: m})
			}
		}
	})
	return objs, err
}

func waitEstablished(ctx context.Context, res dynamic.NamespaceableResourceInterface, name string) error {
	for {
		o, err := res.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubetest: CRD %s not established: %w", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
