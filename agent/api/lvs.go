package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"
)

func (s *server) uploadLVS(w http.ResponseWriter, r *http.Request) error {
	v := mux.Vars(r)
	return s.store(w, r, http.StatusOK, func(ctx context.Context, body []byte) (string, error) {
		return s.svc.UploadLVS(ctx, v["amphora_id"], v["listener_id"], body)
	})
}

func (s *server) getLVS(w http.ResponseWriter, r *http.Request) error {
	data, err := s.svc.LVSConfig(r.Context(), mux.Vars(r)["listener_id"])
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	w.Write(data)
	return nil
}
