package lifecycle

import (
	"context"

	"github.com/sbxedge/sbx/control/store"
)

// EventHook is told of every event lifecycle writes, inside the
// transaction that writes it, so what it writes and enqueues (webhook
// deliveries) commits or rolls back with the transition.
type EventHook interface {
	StateEvent(ctx context.Context, tx store.Tx, ev store.Event) error
}

// hookedStore hands every transaction's events to hook; it is the one
// place they pass, whichever transition wrote them.
type hookedStore struct {
	store.Store
	hook EventHook
}

func (s hookedStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return s.Store.InTx(ctx, func(tx store.Tx) error { return fn(hookedTx{tx, s.hook}) })
}

type hookedTx struct {
	store.Tx
	hook EventHook
}

func (t hookedTx) InsertEvent(ctx context.Context, e store.Event) error {
	if err := t.Tx.InsertEvent(ctx, e); err != nil {
		return err
	}
	return t.hook.StateEvent(ctx, t.Tx, e)
}
