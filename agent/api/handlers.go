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
	return answer(w, info, err)
}

func (s *server) details(w http.ResponseWriter, r *http.Request) error {
	details, err := s.svc.Details(r.Context())
	return answer(w, details, err)
}

func (s *server) listeners(w http.ResponseWriter, r *http.Request) error {
	list, err := s.svc.Listeners(r.Context())
	return answer(w, list, err)
}

// answer writes v as a 200 JSON body, or returns err for the one place
// that maps errors to JSON.
func answer(w http.ResponseWriter, v any, err error) error {
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// apply hands the request body to do and answers status with OK.
func (s *server) apply(w http.ResponseWriter, r *http.Request, status int, do func(ctx context.Context, body []byte) error) error {
	body, err := s.body(r)
	if err != nil {
		return err
	}
	if err := do(r.Context(), body); err != nil {
		return err
	}
	writeJSON(w, status, ok())
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
	return s.apply(w, r, http.StatusAccepted, s.svc.RotateCertificate)
}

func (s *server) updateConfig(w http.ResponseWriter, r *http.Request) error {
	return s.apply(w, r, http.StatusAccepted, s.svc.UpdateConfig)
}
