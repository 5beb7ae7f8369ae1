package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/webhook"
	"github.com/sbxedge/sbx/internal/problem"
)

// Webhooks is the subset of webhook.Hub the API uses.
type Webhooks interface {
	Create(ctx context.Context, accountID, url string, events []string) (store.Webhook, string, error)
	List(ctx context.Context, accountID string) ([]store.Webhook, error)
	Delete(ctx context.Context, accountID, id string) error
	Deliveries(ctx context.Context, accountID, id string, limit int) ([]store.WebhookDelivery, error)
	Redeliver(ctx context.Context, accountID, webhookID, deliveryID string) (store.WebhookDelivery, error)
}

var errWebhooksOff = problem.New(http.StatusNotFound, "webhooks_disabled", "webhooks are not enabled on this deployment")

type webhookRequest struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
}

type webhookView struct {
	ID        string    `json:"id"`
	URL       string    `json:"url"`
	Events    []string  `json:"events"`
	CreatedAt time.Time `json:"created_at"`
	// Secret is set in the answer to the create only.
	Secret string `json:"secret,omitempty"`
}

type webhookListView struct {
	Webhooks []webhookView `json:"webhooks"`
}

type deliveryView struct {
	ID             string          `json:"id"`
	WebhookID      string          `json:"webhook_id"`
	EventID        string          `json:"event_id"`
	EventType      string          `json:"event_type"`
	SandboxID      string          `json:"sandbox_id"`
	Status         string          `json:"status"`
	Attempts       int             `json:"attempts"`
	LastAttemptAt  *time.Time      `json:"last_attempt_at"`
	LastStatusCode *int            `json:"last_status_code"`
	LastDurationMS int64           `json:"last_duration_ms"`
	LastError      string          `json:"last_error"`
	NextRetryAt    *time.Time      `json:"next_retry_at"`
	DeliveredAt    *time.Time      `json:"delivered_at"`
	CreatedAt      time.Time       `json:"created_at"`
	Payload        json.RawMessage `json:"payload"`
}

type deliveryListView struct {
	Deliveries []deliveryView `json:"deliveries"`
}

func viewWebhook(w store.Webhook) webhookView {
	return webhookView{ID: w.ID, URL: w.URL, Events: w.Events, CreatedAt: w.CreatedAt.UTC()}
}

func viewDelivery(d store.WebhookDelivery) deliveryView {
	v := deliveryView{ID: d.ID, WebhookID: d.WebhookID, EventID: d.MessageID, EventType: d.EventType,
		SandboxID: d.SandboxID, Status: d.Status, Attempts: d.Attempts, LastAttemptAt: d.LastAttemptAt,
		LastDurationMS: d.LastDuration.Milliseconds(), LastError: d.LastError, NextRetryAt: d.NextRetryAt,
		DeliveredAt: d.DeliveredAt, CreatedAt: d.CreatedAt.UTC(), Payload: d.Body}
	if d.LastStatusCode != 0 {
		v.LastStatusCode = &d.LastStatusCode
	}
	return v
}

// webhookProblem maps the hub's errors; the rest go through writeError.
func webhookProblem(err error) *problem.Problem {
	var fe *webhook.FieldError
	switch {
	case errors.As(err, &fe):
		return unprocessable(fe.Field, fe.Detail)
	case errors.Is(err, webhook.ErrNotFound):
		return problem.New(http.StatusNotFound, "webhook_not_found", webhook.ErrNotFound.Error())
	case errors.Is(err, webhook.ErrLimit):
		return problem.New(http.StatusConflict, "webhook_limit", refusal(err, webhook.ErrLimit))
	}
	return nil
}

func (s *Server) writeWebhookError(w http.ResponseWriter, r *http.Request, err error) {
	if p := webhookProblem(err); p != nil {
		writeProblem(w, r, p)
		return
	}
	writeError(w, r, err)
}

// hooksOn answers 404 when no hub is wired (an API built without one).
func (s *Server) hooksOn(w http.ResponseWriter, r *http.Request) bool {
	if s.hooks == nil {
		writeProblem(w, r, errWebhooksOff)
		return false
	}
	return true
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) {
	var req webhookRequest
	if !s.hooksOn(w, r) || !s.decode(w, r, &req) {
		return
	}
	hook, secret, err := s.hooks.Create(r.Context(), account(r).ID, req.URL, req.Events)
	if err != nil {
		s.writeWebhookError(w, r, err)
		return
	}
	v := viewWebhook(hook)
	v.Secret = secret
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	if !s.hooksOn(w, r) {
		return
	}
	list, err := s.hooks.List(r.Context(), account(r).ID)
	if err != nil {
		s.writeWebhookError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, webhookListView{Webhooks: views(list, viewWebhook)})
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	if !s.hooksOn(w, r) {
		return
	}
	if err := s.hooks.Delete(r.Context(), account(r).ID, chi.URLParam(r, "id")); err != nil {
		s.writeWebhookError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request) {
	if !s.hooksOn(w, r) {
		return
	}
	limit, ok := pageLimit(w, r)
	if !ok {
		return
	}
	list, err := s.hooks.Deliveries(r.Context(), account(r).ID, chi.URLParam(r, "id"), limit)
	if err != nil {
		s.writeWebhookError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, deliveryListView{Deliveries: views(list, viewDelivery)})
}

func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) {
	if !s.hooksOn(w, r) {
		return
	}
	d, err := s.hooks.Redeliver(r.Context(), account(r).ID, chi.URLParam(r, "id"), chi.URLParam(r, "delivery_id"))
	if err != nil {
		s.writeWebhookError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, viewDelivery(d))
}
