// Package deploy holds the Kubernetes manifests (kustomize base and
// overlays) and the Dockerfiles; its tests render every overlay, decode
// each object strictly into client-go's types, apply them to a real
// kube-apiserver and check the RBAC rules against the calls the k8s
// provider makes. It exports the control Role for other packages' tests,
// which run control under it.
package deploy

import (
	"bufio"
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

//go:embed base/control-rbac.yaml
var controlRBAC []byte

// ControlRBAC is the Role control runs under in the sandbox namespace and
// the RoleBinding that grants it to control's ServiceAccount, as
// base/control-rbac.yaml declares them.
func ControlRBAC() (*rbacv1.Role, *rbacv1.RoleBinding, error) {
	codec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var role *rbacv1.Role
	var binding *rbacv1.RoleBinding
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(controlRBAC)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := codec.Decode(doc, nil, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("control-rbac.yaml: %w", err)
		}
		switch o := obj.(type) {
		case *rbacv1.Role:
			role = o
		case *rbacv1.RoleBinding:
			binding = o
		}
	}
	if role == nil || binding == nil {
		return nil, nil, errors.New("control-rbac.yaml: want one Role and one RoleBinding")
	}
	return role, binding, nil
}
