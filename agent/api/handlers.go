package api

import (
	"context"
	"net/http"

	"github.com/amphora-agent/amphora-agent/agent"
)

type versionBody struct {
	APIVersion string `json:"api_version"`
}

func (s *server) versionDiscovery(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, versionBody{APIVersion: agent.APIVersion})
	return nil
}

func (s *server) info(w http.ResponseWriter, r *http.Request) error {
	info, err := s.svc.Info(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (s *server) details(w http.ResponseWriter, r *http.Request) error {
	details, err := s.svc.Details(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, details)
	return nil
}

func (s *server) listeners(w http.ResponseWriter, r *http.Request) error {
	list, err := s.svc.Listeners(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// store hands the request body to save, which stores it and returns its
// ETag, and answers status with the ETag: every upload answers this way.
func (s *server) store(w http.ResponseWriter, r *http.Request, status int, save func(ctx context.Context, body []byte) (string, error)) error {
	body, err := s.body(r)
	if err != nil {
		return err
	}
	etag, err := save(r.Context(), body)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag)
	writeJSON(w, status, ok())
	return nil
}

func (s *server) rotateCertificate(w http.ResponseWriter, r *http.Request) error {
	body, err := s.body(r)
	if err != nil {
		return err
	}
	if err := s.svc.RotateCertificate(r.Context(), body); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, ok())
	return nil
}

func (s *server) updateConfig(w http.ResponseWriter, r *http.Request) error {
	body, err := s.body(r)
	if err != nil {
		return err
	}
	if err := s.svc.UpdateConfig(r.Context(), body); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, ok())
	return nil
}
