package preview

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// frame builds one WebSocket frame with n payload bytes.
func frame(n int, masked bool) []byte {
	var h []byte
	b1 := byte(0)
	if masked {
		b1 = 0x80
	}
	switch {
	case n < 126:
		h = []byte{0x82, b1 | byte(n)}
	case n < 1<<16:
		h = []byte{0x82, b1 | 126, 0, 0}
		binary.BigEndian.PutUint16(h[2:], uint16(n))
	default:
		h = make([]byte, 10)
		h[0], h[1] = 0x82, b1|127
		binary.BigEndian.PutUint64(h[2:], uint64(n))
	}
	if masked {
		h = append(h, 1, 2, 3, 4)
	}
	return append(h, bytes.Repeat([]byte{'x'}, n)...)
}

func TestFrameTrackerBoundaries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frames [][]byte
	}{
		{"empty payload", [][]byte{frame(0, false), frame(0, false)}},
		{"short", [][]byte{frame(5, false), frame(125, false)}},
		{"16-bit length", [][]byte{frame(126, false), frame(70_000-1<<16+300, false)}},
		{"64-bit length", [][]byte{frame(1<<16+3, false), frame(1, false)}},
		{"masked", [][]byte{frame(3, true), frame(200, true)}},
	} {
		stream := bytes.Join(tc.frames, nil)
		ends := map[int]bool{}
		off := 0
		for _, f := range tc.frames {
			off += len(f)
			ends[off] = true
		}
		// Fed in chunks of every size up to 7 bytes, the tracker is at a
		// boundary exactly at the end of each frame.
		for chunk := 1; chunk <= 7; chunk++ {
			var f frameTracker
			for i := 0; i < len(stream); {
				n := min(chunk, len(stream)-i)
				if got := f.feed(stream[i:i+n], false); got != n {
					t.Fatalf("%s, chunk %d: feed took %d of %d", tc.name, chunk, got, n)
				}
				i += n
				if f.atBoundary() && !ends[i] {
					t.Fatalf("%s, chunk %d: boundary at %d, want only at %v", tc.name, chunk, i, ends)
				}
			}
			if !f.atBoundary() {
				t.Errorf("%s, chunk %d: not at a boundary after the last frame", tc.name, chunk)
			}
		}
		// With stop, a whole-stream write is taken only up to the end of
		// the frame in progress.
		var f frameTracker
		f.feed(stream[:1], false)
		if got := f.feed(stream[1:], true); got != len(tc.frames[0])-1 {
			t.Errorf("%s: stop took %d bytes, want %d (the rest of the first frame)", tc.name, got, len(tc.frames[0])-1)
		}
	}
}

// TestRevokeMidFrame: a close requested while the upstream is inside a
// frame goes out right after that frame, and nothing after it.
func TestRevokeMidFrame(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	ws := &wsConn{Conn: server}
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(client); got <- b }()

	first, second := frame(10, false), frame(4, false)
	if _, err := ws.Write(first[:5]); err != nil {
		t.Fatal(err)
	}
	if ws.revoke(1008, "gone") {
		t.Fatal("revoke sent the close frame inside a frame")
	}
	rest := append(append([]byte{}, first[5:]...), second...)
	n, err := ws.Write(rest)
	if n != len(first)-5 || err == nil {
		t.Errorf("write across the boundary: %d, %v; want %d and an error", n, err, len(first)-5)
	}
	_ = ws.forceClose()
	want := append(append([]byte{}, first...), closeFrame(1008, "gone")...)
	if b := <-got; !bytes.Equal(b, want) {
		t.Errorf("client read %x, want %x (the first frame, then the close frame)", b, want)
	}
}
