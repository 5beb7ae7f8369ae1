package memstore_test

import (
	"testing"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/activity/activitytest"
	"github.com/sbxedge/sbx/activity/memstore"
)

func TestConformance(t *testing.T) {
	newStore := func(t *testing.T) activity.Store {
		s := memstore.New(nil)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	activitytest.Run(t, activitytest.Backend{
		New: newStore,
		// An in-memory store loses its records when its process ends: the
		// next process starts a fresh store.
		Lose: func(t *testing.T, s activity.Store) activity.Store {
			_ = s.Close()
			return newStore(t)
		},
	})
}
