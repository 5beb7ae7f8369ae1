package authority

import "container/heap"

// expiryHeap orders connections by expiry, earliest first; each Conn
// knows its index so Remove is O(log n). The Registry's mu guards it.
type expiryHeap[T any] []*Conn[T]

func (h expiryHeap[T]) Len() int           { return len(h) }
func (h expiryHeap[T]) Less(i, j int) bool { return h[i].expires.Before(h[j].expires) }
func (h expiryHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

// Push and Pop are for container/heap only; use push, pop and remove.
func (h *expiryHeap[T]) Push(x any) {
	c := x.(*Conn[T])
	c.heapIdx = len(*h)
	*h = append(*h, c)
}

func (h *expiryHeap[T]) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	c.heapIdx = -1
	return c
}

func (h *expiryHeap[T]) push(c *Conn[T]) { heap.Push(h, c) }
func (h *expiryHeap[T]) pop() *Conn[T]   { return heap.Pop(h).(*Conn[T]) }
func (h *expiryHeap[T]) remove(i int)    { heap.Remove(h, i) }
