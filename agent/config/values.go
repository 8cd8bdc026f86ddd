package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
)

func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "1", "on", "yes":
		return true, nil
	case "false", "0", "off", "no":
		return false, nil
	}
	return false, errors.New("must be a boolean (true/false, yes/no, on/off, 1/0)")
}

func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return 0, errors.New("integer out of range")
		}
		return 0, errors.New("must be an integer")
	}
	return n, nil
}

func parseIntRange(lo, hi int) func(string) (int, error) {
	return func(s string) (int, error) {
		n, err := parseInt(s)
		if err != nil {
			return 0, err
		}
		if n < int64(lo) || n > int64(hi) {
			if hi == math.MaxInt32 {
				return 0, fmt.Errorf("must be at least %d", lo)
			}
			return 0, fmt.Errorf("must be between %d and %d", lo, hi)
		}
		return int(n), nil
	}
}

func parsePositiveInt64(s string) (int64, error) {
	n, err := parseInt(s)
	if err != nil {
		return 0, err
	}
	if n <= 0 {
		return 0, errors.New("must be greater than 0")
	}
	return n, nil
}

// maxSeconds keeps a count of seconds within time.Duration.
const maxSeconds = math.MaxInt64 / int64(time.Second)

// parseSeconds reads a whole number of seconds, at least min.
func parseSeconds(min int64) func(string) (time.Duration, error) {
	return func(s string) (time.Duration, error) {
		n, err := parseInt(s)
		if err != nil {
			return 0, err
		}
		if n < min {
			return 0, fmt.Errorf("must be at least %d", min)
		}
		if n > maxSeconds || n < -maxSeconds {
			return 0, errors.New("integer out of range")
		}
		return time.Duration(n) * time.Second, nil
	}
}

func parsePath(s string) (string, error) {
	if s == "" || !filepath.IsAbs(s) || strings.ContainsFunc(s, unicode.IsControl) {
		return "", errors.New("must be an absolute path")
	}
	return s, nil
}

func parseIP(s string) (string, error) {
	if _, err := netip.ParseAddr(s); err != nil {
		return "", errors.New("must be an IPv4 or IPv6 address")
	}
	return s, nil
}

// parseIPPort takes an IP literal and a port, "127.0.0.1:9102" or
// "[::1]:9102".
func parseIPPort(s string) (string, error) {
	ap, err := netip.ParseAddrPort(strings.TrimSpace(s))
	if err != nil || ap.Port() == 0 {
		return "", errors.New("must be an IP address and a port, such as 127.0.0.1:9102")
	}
	return ap.String(), nil
}

func parseTLSProtocol(s string) (string, error) {
	switch s {
	case "SSLv3", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3":
		return s, nil
	}
	return "", errors.New("must be one of SSLv3, TLSv1, TLSv1.1, TLSv1.2, TLSv1.3")
}

// syslogFacilities are the names oslo.log accepts.
var syslogFacilities = []string{
	"KERN", "USER", "MAIL", "DAEMON", "AUTH", "SYSLOG", "LPR", "NEWS",
	"UUCP", "CRON", "AUTHPRIV", "FTP", "LOCAL0", "LOCAL1", "LOCAL2",
	"LOCAL3", "LOCAL4", "LOCAL5", "LOCAL6", "LOCAL7",
}

func parseSyslogFacility(s string) (string, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(s)), "LOG_")
	for _, f := range syslogFacilities {
		if name == f {
			return "LOG_" + f, nil
		}
	}
	return "", errors.New("must be a syslog facility such as LOG_USER, LOG_DAEMON or LOG_LOCAL0..LOG_LOCAL7")
}

func parseTopology(s string) (string, error) {
	switch strings.ReplaceAll(strings.ToUpper(strings.TrimSpace(s)), "-", "_") {
	case TopologySingle:
		return TopologySingle, nil
	case TopologyActiveStandby:
		return TopologyActiveStandby, nil
	}
	return "", errors.New("must be SINGLE or ACTIVE_STANDBY")
}

// parseNamespace accepts names that are safe as a path element under
// /var/run/netns and as a command argument.
func parseNamespace(s string) (string, error) {
	ok := s != "" && len(s) <= namespaceMaxLen && s != "." && s != ".."
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-'
	}
	if !ok {
		return "", fmt.Errorf("must be 1 to %d characters of A-Z, a-z, 0-9, '_', '.', '-' (not . or ..)", namespaceMaxLen)
	}
	return s, nil
}

// parseHostPort splits a heartbeat destination at its last ':' like
// upstream, so unbracketed IPv6 addresses work too, and joins it back in
// the form Go's resolver takes.
func parseHostPort(item string) (string, error) {
	i := strings.LastIndexByte(item, ':')
	if i < 0 {
		return "", errors.New("expected host:port")
	}
	host, port := item[:i], item[i+1:]
	if len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	if host == "" {
		return "", errors.New("empty host")
	}
	if strings.ContainsAny(host, "[]") || strings.ContainsFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return "", errors.New("invalid host")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", errors.New("port must be between 1 and 65535")
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}
