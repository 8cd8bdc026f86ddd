package api

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"
)

func (s *server) uploadHAProxy(w http.ResponseWriter, r *http.Request) error {
	v := mux.Vars(r)
	return s.store(w, r, http.StatusAccepted, func(ctx context.Context, body []byte) (string, error) {
		return s.svc.UploadHAProxy(ctx, v["amphora_id"], v["lb_id"], body)
	})
}

func (s *server) getHAProxy(w http.ResponseWriter, r *http.Request) error {
	data, etag, err := s.svc.HAProxyConfig(r.Context(), mux.Vars(r)["lb_id"])
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.Header().Set("ETag", etag)
	w.WriteHeader(http.StatusOK)
	w.Write(data)
	return nil
}

func (s *server) loadBalancerAction(w http.ResponseWriter, r *http.Request) error {
	v := mux.Vars(r)
	details, err := s.svc.LoadBalancerAction(r.Context(), v["object_id"], v["action"])
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, okDetails(details))
	return nil
}

func (s *server) deleteListener(w http.ResponseWriter, r *http.Request) error {
	if err := s.svc.DeleteListener(r.Context(), mux.Vars(r)["object_id"]); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ok())
	return nil
}

type md5Body struct {
	MD5Sum string `json:"md5sum"`
}

func (s *server) putCertificate(w http.ResponseWriter, r *http.Request) error {
	v := mux.Vars(r)
	// The name is checked after the body is read: mutate reads it, within
	// the budget, before it calls this handler. Upstream checks the name
	// first, so a bad name sent with a body too large or too slow is
	// answered here for the body, there for the name. Checking it here
	// still spares the wait for the mutation lock (the store checks it
	// again under the lock).
	if err := s.svc.ValidateCertificateName(v["filename"]); err != nil {
		return err
	}
	return s.store(w, r, http.StatusOK, func(ctx context.Context, body []byte) (string, error) {
		return s.svc.PutCertificate(ctx, v["lb_id"], v["filename"], body)
	})
}

func (s *server) getCertificate(w http.ResponseWriter, r *http.Request) error {
	v := mux.Vars(r)
	sum, err := s.svc.CertificateMD5(r.Context(), v["lb_id"], v["filename"])
	if err != nil {
		return err
	}
	w.Header().Set("ETag", sum)
	writeJSON(w, http.StatusOK, md5Body{MD5Sum: sum})
	return nil
}

func (s *server) deleteCertificate(w http.ResponseWriter, r *http.Request) error {
	v := mux.Vars(r)
	if err := s.svc.DeleteCertificate(r.Context(), v["lb_id"], v["filename"]); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ok())
	return nil
}
