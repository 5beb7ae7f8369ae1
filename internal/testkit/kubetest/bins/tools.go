//go:build tools

// Package bins pins the Kubernetes control plane the tests run: this
// module requires k8s.io/kubernetes at the version matching the client-go
// of the main module, and replaces each staging module with its published
// k8s.io/<name> twin (the kubernetes module points them at ./staging,
// which a module download does not have). `make k8s-bins` builds
// kube-apiserver and etcd from here into a cache folder outside the
// repository; see ../kubetest.go.
package bins

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
