package internalapi

import (
	"context"
	"errors"

	"github.com/sbxedge/sbx/control/connections"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// ConnectionLog stores the edge's connection batches; *connections.Log
// satisfies it.
type ConnectionLog interface {
	ReportConnections(ctx context.Context, b edgeapi.ConnectionsReport) error
}

var _ ConnectionLog = (*connections.Log)(nil)

// reportConnections stores one batch of the edge's connection log.
func (s *Server) reportConnections(ctx context.Context, req edgeapi.ConnectionsReport) (edgeapi.ConnectionsReportResponse, error) {
	err := s.deps.Connections.ReportConnections(ctx, req)
	if errors.Is(err, connections.ErrInvalid) {
		return edgeapi.ConnectionsReportResponse{}, badRequest(err.Error())
	}
	if err != nil {
		return edgeapi.ConnectionsReportResponse{}, err
	}
	return edgeapi.ConnectionsReportResponse{Recorded: len(req.Records)}, nil
}
