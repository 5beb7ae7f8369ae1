package sshbroker

import (
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
)

// The broker offers what OpenSSH 9.x offers by default and x/crypto
// implements, less anything resting on SHA-1: no diffie-hellman-*-sha1
// key exchange, no hmac-sha1 MAC, no ssh-rsa (SHA-1) signatures from
// clients or for our host key. x/crypto's defaults still carry some of
// them for old peers; a client that can do nothing else is refused, as
// OpenSSH 8.8 and later refuse it.

// restrictAlgorithms sets c's key exchanges, MACs and client signature
// algorithms; ciphers are chosen per connection (ciphers.go).
func restrictAlgorithms(c *ssh.ServerConfig) {
	s := ssh.SupportedAlgorithms()
	c.KeyExchanges = withoutSHA1(s.KeyExchanges)
	c.MACs = withoutSHA1(s.MACs)
	c.PublicKeyAuthAlgorithms = withoutSHA1(s.PublicKeyAuths)
}

// hostKeySigner keeps an RSA host key to its SHA-2 signatures.
func hostKeySigner(k ssh.Signer) ssh.Signer {
	as, ok := k.(ssh.AlgorithmSigner)
	if !ok || k.PublicKey().Type() != ssh.KeyAlgoRSA {
		return k
	}
	s, err := ssh.NewSignerWithAlgorithms(as, []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256})
	if err != nil {
		return k
	}
	return s
}

func withoutSHA1(names []string) []string {
	return slices.DeleteFunc(slices.Clone(names), func(n string) bool {
		return strings.Contains(n, "sha1") || n == "ssh-rsa" || n == "ssh-dss"
	})
}
