package memstore_test

import (
	"testing"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/activity/activitytest"
	"github.com/sbxedge/sbx/activity/memstore"
)

func TestConformance(t *testing.T) {
	activitytest.Run(t, func(t *testing.T) activity.Store {
		s := memstore.New(nil)
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
