package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/amphora-agent/amphora-agent/agent/config"
)

// resolveTimeout bounds one destination's name lookup.
const resolveTimeout = 2 * time.Second

// send hands data to the next destination of the rotation. A destination
// that cannot be resolved is logged and the next one is tried, so each
// heartbeat still goes to exactly one health manager.
func (s *Sender) send(ctx context.Context, cfg *config.Config, data []byte, fields []zap.Field) {
	if !slices.Equal(s.dests, cfg.ControllerIPPortList) {
		s.dests, s.next = slices.Clone(cfg.ControllerIPPortList), 0
	}
	now := time.Now()
	if len(s.dests) == 0 {
		s.state.failed("not sent: no destination (controller_ip_port_list is empty)")
		if ok, n := s.limit.allow("nodest", now); ok {
			s.log.Error("no heartbeat destination: [health_manager] controller_ip_port_list is empty",
				zap.Int("suppressed_since_last_log", n))
		}
		return
	}
	for range s.dests {
		dest := s.dests[s.next]
		s.next = (s.next + 1) % len(s.dests)
		addr, err := s.resolve(ctx, dest)
		if err != nil {
			s.state.failed("not sent: cannot resolve " + dest + ": " + err.Error())
			if ok, n := s.limit.allow("resolve:"+dest, now); ok {
				s.log.Error("cannot resolve heartbeat destination", zap.String("destination", dest),
					zap.Error(err), zap.Int("suppressed_since_last_log", n))
			}
			continue
		}
		if err := s.write(addr, data); err != nil {
			s.state.failed("not sent to " + dest + ": " + err.Error())
			if ok, n := s.limit.allow("send:"+dest, now); ok {
				s.log.Warn("heartbeat not sent", append([]zap.Field{zap.String("destination", dest),
					zap.Stringer("address", addr), zap.Error(err), zap.Int("suppressed_since_last_log", n)}, fields...)...)
			}
			return
		}
		s.limit.reset("send:" + dest)
		s.state.update(func(st *State) { st.LastSendAt, st.Destination, st.LastResult = time.Now(), dest, "sent" })
		s.log.Debug("heartbeat sent", append([]zap.Field{zap.String("destination", dest), zap.Stringer("address", addr)}, fields...)...)
		if s.sent != nil {
			s.sent(dest, data)
		}
		return
	}
}

// resolve turns a host:port item into a UDP address: IP literals (with an
// optional zone) directly, host names through the resolver on every
// heartbeat, keeping the first answer as getaddrinfo's first result.
func (s *Sender) resolve(ctx context.Context, dest string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(dest)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := net.LookupPort("udp", port)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(ip.Unmap(), uint16(p)), nil
	}
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	ips, err := s.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, errors.New("no address")
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(p)), nil
}

// write sends on the unconnected socket of the address's family (one
// AF_INET, one AF_INET6, kernel-chosen source), opened on first use.
func (s *Sender) write(addr netip.AddrPort, data []byte) error {
	conn := &s.v4
	network := "udp4"
	if addr.Addr().Is6() {
		conn, network = &s.v6, "udp6"
	}
	if *conn == nil {
		c, err := net.ListenUDP(network, nil)
		if err != nil {
			return fmt.Errorf("open %s socket: %w", network, err)
		}
		*conn = c
	}
	ua := &net.UDPAddr{IP: addr.Addr().AsSlice(), Port: int(addr.Port()), Zone: addr.Addr().Zone()}
	_, err := (*conn).WriteToUDP(data, ua)
	return err
}

func (s *Sender) closeSockets() {
	for _, c := range []*net.UDPConn{s.v4, s.v6} {
		if c != nil {
			c.Close()
		}
	}
	s.v4, s.v6 = nil, nil
}
