package tart

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// slots counts, per host, the VMs that are running or about to run, so
// control never asks a host for a VM past its licence limit. A host's
// count is the union of what `tart list` says runs there (VMs started by
// anyone) and the reservations of runs this provider is making.
type slots struct {
	mu       sync.Mutex                 // guards reserved, changed
	reserved map[string]map[string]bool // host → VM names
	changed  chan struct{}              // closed and replaced when a slot frees
}

func newSlots() *slots {
	return &slots{reserved: map[string]map[string]bool{}, changed: make(chan struct{})}
}

// tryReserve reserves a slot for vm on the freest host that has one and
// returns it; ok is false with the counts when every host is full.
func (s *slots) tryReserve(ctx context.Context, hosts []*host, vm string, pick func(*host) bool) (h *host, used, total int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *host
	bestFree := 0
	for _, hh := range hosts {
		if pick != nil && !pick(hh) {
			continue
		}
		vms, lerr := hh.driver.List(ctx)
		if lerr != nil {
			err = fmt.Errorf("list VMs on host %s: %w", hh.name, lerr)
			continue
		}
		busy := map[string]bool{}
		for _, v := range vms {
			if v.Running {
				busy[v.Name] = true
			}
		}
		for name := range s.reserved[hh.name] {
			busy[name] = true
		}
		if busy[vm] {
			return hh, len(busy), hh.slots, nil // already has its slot
		}
		used += len(busy)
		total += hh.slots
		if free := hh.slots - len(busy); free > bestFree {
			best, bestFree = hh, free
		}
	}
	if best == nil {
		return nil, used, total, err
	}
	if s.reserved[best.name] == nil {
		s.reserved[best.name] = map[string]bool{}
	}
	s.reserved[best.name][vm] = true
	return best, used + 1, total, nil
}

// release frees vm's reservation; call it once the VM no longer runs (or
// runs, and tart list counts it).
func (s *slots) release(hostName, vm string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reserved[hostName][vm] {
		delete(s.reserved[hostName], vm)
	}
	s.notifyLocked()
}

func (s *slots) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *slots) changedCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// slotPoll is how often a waiting create looks again without being woken:
// a VM stopped by someone else frees a slot without telling us.
const slotPoll = 2 * time.Second

// reserve waits for a slot for vm until ctx ends, calling wait with the
// counts each time it finds every host full and the counts changed.
func (s *slots) reserve(ctx context.Context, hosts []*host, vm string, pick func(*host) bool, wait func(used, total, hosts int)) (*host, error) {
	lastUsed, lastTotal := -1, -1
	for {
		ch := s.changedCh()
		h, used, total, err := s.tryReserve(ctx, hosts, vm, pick)
		if h != nil {
			return h, nil
		}
		if total == 0 && err != nil {
			return nil, err
		}
		if used != lastUsed || total != lastTotal {
			wait(used, total, len(hosts))
			lastUsed, lastTotal = used, total
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no macOS slot came free (%d of %d in use on %s): %w", used, total, plural(len(hosts), "host"), ctx.Err())
		case <-ch:
		case <-time.After(slotPoll):
		}
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// WaitingMessage is the event a create waiting for a slot records.
func WaitingMessage(used, total, hosts int) string {
	return fmt.Sprintf("waiting for a macOS slot (%d of %d in use on %s)", used, total, plural(hosts, "host"))
}
