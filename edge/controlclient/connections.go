package controlclient

import (
	"context"
	"net/http"

	"github.com/sbxedge/sbx/internal/connlog"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

var _ connlog.Sink = (*Client)(nil)

// ReportConnections sends one batch of the edge's connection log.
func (c *Client) ReportConnections(ctx context.Context, b connlog.Batch) error {
	return c.Do(ctx, http.MethodPost, edgeapi.PathConnections, b, &edgeapi.ConnectionsReportResponse{})
}
