package kubetest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the cluster's certificates, written under dir: one CA that signs
// the apiserver's serving certificate and the admin's client certificate,
// and the service-account token signing key.
type pki struct {
	caPEM, adminCertPEM, adminKeyPEM []byte
	// Files handed to kube-apiserver.
	caFile, servingCert, servingKey, saPub, saKey string
}

func newPKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "sbx-kubetest-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber = serial()
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, err
		}
		return pemBlock("CERTIFICATE", der), mustKeyPEM(key), nil
	}
	p := &pki{caPEM: pemBlock("CERTIFICATE", caDER)}
	servCert, servKey, err := issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 0, 0, 1)},
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	// system:masters is the group RBAC never restricts: the harness and
	// the test kubelet act as cluster admins; code under test impersonates
	// a ServiceAccount instead (Cluster.As).
	if p.adminCertPEM, p.adminKeyPEM, err = issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "sbx-kubetest-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, fmt.Errorf("admin certificate: %w", err)
	}
	// ServiceAccount tokens are signed with RSA: RS256 is the one
	// algorithm every token verifier accepts.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		path *string
		name string
		data []byte
	}{
		{&p.caFile, "ca.crt", p.caPEM},
		{&p.servingCert, "apiserver.crt", servCert},
		{&p.servingKey, "apiserver.key", servKey},
		{&p.saPub, "sa.pub", pemBlock("PUBLIC KEY", saPubDER)},
		{&p.saKey, "sa.key", mustKeyPEM(saKey)},
	}
	for _, f := range files {
		*f.path = filepath.Join(dir, f.name)
		if err := os.WriteFile(*f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func mustKeyPEM(k crypto.Signer) []byte {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		panic(err) // only for key types MarshalPKCS8PrivateKey always takes
	}
	return pemBlock("PRIVATE KEY", der)
}
