// Package podtcp is the plain-TCP road from the edge to a port inside a
// sandbox: a forwarder that runs in the sandbox (its init, or the local
// provider) and the edge's dialer for it.
//
// Both ends prove who they are before a byte of the stream passes, with
// the trust the SSH road already has: the edge signs with a short-lived
// user certificate from the internal CA (as it would log in to sshd),
// and the forwarder signs with the sandbox's host key, which control
// pinned at provisioning. Each side signs the other's fresh nonce, the
// port and the pinned host key, so nothing recorded can be replayed and
// a handshake meant for one sandbox opens nothing in another: that one
// answers the edge with its own key's signature, which the edge finds is
// not the pinned key's (ErrHostKey), as a pod address that now belongs
// to another sandbox shows on the SSH road. After the
// handshake the stream is the app's bytes, unencrypted: this road is for
// a cluster network the operator trusts not to be read, as an ingress
// controller's hop to a pod is. Everything else (exec, files, terminals)
// and clusters that want encryption keep the SSH road.
//
// The wire, version 1:
//
//	forwarder → edge  "SBXFWD1\n" and a 32-byte nonce
//	edge → forwarder  frame(hello{cert, port, nonce, signature, pinned host key})
//	forwarder → edge  frame(reply{status, signature})
//	then the port's bytes, both ways
//
// A frame is a 4-byte big-endian length and that many bytes, encoded as
// SSH messages are (ssh.Marshal). A forwarder that refuses the edge
// closes the connection without a reply: why is in its log, not in
// anything a caller who is not the edge can read.
package podtcp

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/ssh"
)

const (
	magic     = "SBXFWD1\n"
	nonceSize = 32
	// maxFrame bounds a hello or a reply: a certificate and a signature
	// take well under 2 KiB.
	maxFrame = 8 << 10
)

// Reply statuses.
const (
	statusOpen    uint32 = 0 // connected to the port; the stream follows
	statusRefused uint32 = 1 // nothing listens on the port (127.0.0.1 or ::1)
	statusFailed  uint32 = 2 // the port could not be reached otherwise
	statusOther   uint32 = 3 // the edge pinned another sandbox's host key
)

// hello is the edge's half of the handshake.
type hello struct {
	Cert  []byte // the edge's user certificate, SSH wire form
	Port  uint32
	Nonce []byte
	Sig   []byte // ssh.Signature of clientTranscript, SSH wire form
	// HostKey is the host key the edge pinned, SSH wire form: the one
	// its transcript names.
	HostKey []byte
}

// reply is the forwarder's half.
type reply struct {
	Status uint32
	Sig    []byte // ssh.Signature of serverTranscript by the host key
}

// transcript is what each side signs; Domain keeps a signature made for
// one side or version from being valid for another.
type transcript struct {
	Domain      string
	ServerNonce []byte
	ClientNonce []byte
	Port        uint32
	Status      uint32
	HostKey     []byte // the sandbox host key, SSH wire form
}

const (
	domainClient = "sbx-podtcp-v1 edge"
	domainServer = "sbx-podtcp-v1 forwarder"
)

func (t transcript) bytes() []byte { return ssh.Marshal(&t) }

func newNonce() ([]byte, error) {
	b := make([]byte, nonceSize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("podtcp: nonce: %w", err)
	}
	return b, nil
}

func writeFrame(w io.Writer, msg any) error {
	body := ssh.Marshal(msg)
	b := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(b, uint32(len(body)))
	_, err := w.Write(append(b, body...))
	return err
}

var errFrame = errors.New("podtcp: malformed frame")

// readFrame reads one frame into msg. It reads exactly the frame, never
// past it: the bytes after the handshake belong to the stream.
func readFrame(r io.Reader, msg any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size == 0 || size > maxFrame {
		return fmt.Errorf("%w: %d bytes", errFrame, size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	if err := ssh.Unmarshal(body, msg); err != nil {
		return fmt.Errorf("%w: %w", errFrame, err)
	}
	return nil
}

// sign signs data with s, choosing SHA-512 for an RSA key: the SHA-1
// "ssh-rsa" signature is refused on the other side.
func sign(s ssh.Signer, data []byte) ([]byte, error) {
	key := s.PublicKey()
	if cert, ok := key.(*ssh.Certificate); ok {
		key = cert.Key // a certificate signer signs with the key it certifies
	}
	if as, ok := s.(ssh.AlgorithmSigner); ok && key.Type() == ssh.KeyAlgoRSA {
		sig, err := as.SignWithAlgorithm(rand.Reader, data, ssh.KeyAlgoRSASHA512)
		if err != nil {
			return nil, err
		}
		return ssh.Marshal(sig), nil
	}
	sig, err := s.Sign(rand.Reader, data)
	if err != nil {
		return nil, err
	}
	return ssh.Marshal(sig), nil
}

var errSignature = errors.New("podtcp: bad signature")

// verify checks a signature in SSH wire form by key over data.
func verify(key ssh.PublicKey, data, wire []byte) error {
	var sig ssh.Signature
	if err := ssh.Unmarshal(wire, &sig); err != nil {
		return fmt.Errorf("%w: %w", errSignature, err)
	}
	if sig.Format == ssh.KeyAlgoRSA { // SHA-1
		return fmt.Errorf("%w: %s signatures are not accepted", errSignature, sig.Format)
	}
	if err := key.Verify(data, &sig); err != nil {
		return fmt.Errorf("%w: %w", errSignature, err)
	}
	return nil
}
