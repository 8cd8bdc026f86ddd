package api

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/caller"
)

// askedService notes, for each mutation that starts a daemon or checks a
// config, whether it knows the client that asked.
type askedService struct {
	*fakeService
	asked map[string]bool
}

func (s *askedService) note(what string, ctx context.Context) {
	_, ok := caller.Of(ctx)
	s.asked[what] = ok
}

func (s *askedService) LoadBalancerAction(ctx context.Context, id, action string) (string, error) {
	s.note("action", ctx)
	return s.fakeService.LoadBalancerAction(ctx, id, action)
}

func (s *askedService) UploadHAProxy(ctx context.Context, amp, lb string, body []byte) (string, error) {
	s.note("upload", ctx)
	return s.fakeService.UploadHAProxy(ctx, amp, lb, body)
}

func (s *askedService) VRRPAction(ctx context.Context, action string) (string, error) {
	s.note("vrrp", ctx)
	return s.fakeService.VRRPAction(ctx, action)
}

// The API records the request as the client that asked, so that a start
// waits for readiness, and a check runs, as long as the controller waits.
func TestMutationsKnowTheirClient(t *testing.T) {
	s := &askedService{fakeService: newFake(), asked: map[string]bool{}}
	h := NewHandler(s, zap.NewNop(), Options{})
	serve(t, h, "PUT", "/1.0/loadbalancer/lb1/start", "")
	serve(t, h, "PUT", "/1.0/loadbalancer/amp/lb1/haproxy", "global\n")
	serve(t, h, "PUT", "/1.0/vrrp/start", "")
	for _, what := range []string{"action", "upload", "vrrp"} {
		if !s.asked[what] {
			t.Errorf("%s: the service does not know the client that asked (%v)", what, s.asked)
		}
	}
}
