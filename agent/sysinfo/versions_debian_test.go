package sysinfo

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// The versions of Debian bookworm's and trixie's packages, from dpkg and,
// when dpkg does not know them, from the banners `haproxy -v` and
// `keepalived -v` print (testdata/versions, captured from each release).
// HAProxy 3.0's banner reads as 2.6's; keepalived 2.3 prints its banner
// on stderr as 2.2 does.
func TestLookupVersionsDebianReleases(t *testing.T) {
	const trixieRelease = "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"13\"\nID=debian\n"
	banner := func(name string) string {
		data, err := os.ReadFile(filepath.Join("testdata", "versions", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	for _, tc := range []struct {
		name, osRelease                    string
		haproxyDeb, keepalivedDeb, ipvsDeb string
		haproxyBanner, keepalivedBanner    string
		wantDeb, wantBanner                Versions
	}{
		{
			name: "bookworm", osRelease: debianRelease,
			haproxyDeb: "2.6.12-1+deb12u3", keepalivedDeb: "1:2.2.7-1+b2", ipvsDeb: "1:1.31-1+b1",
			haproxyBanner: "haproxy-v_2.6.12.txt", keepalivedBanner: "keepalived-v_2.2.7.txt",
			wantDeb:    Versions{HAProxy: "2.6.12-1+deb12u3", Keepalived: "1:2.2.7-1+b2", IPVSAdm: "1:1.31-1+b1"},
			wantBanner: Versions{HAProxy: "2.6.12-1+deb12u3", Keepalived: "2.2.7"},
		},
		{
			name: "trixie", osRelease: trixieRelease,
			haproxyDeb: "3.0.11-1+deb13u4", keepalivedDeb: "1:2.3.3-1", ipvsDeb: "1:1.31-5",
			haproxyBanner: "haproxy-v_3.0.11.txt", keepalivedBanner: "keepalived-v_2.3.3.txt",
			wantDeb:    Versions{HAProxy: "3.0.11-1+deb13u4", Keepalived: "1:2.3.3-1", IPVSAdm: "1:1.31-5"},
			wantBanner: Versions{HAProxy: "3.0.11-1+deb13u4", Keepalived: "2.3.3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			osRelease := writeOSRelease(t, tc.osRelease)
			deb := &fakeRunner{results: map[string]fakeResult{
				dpkg("haproxy"): {out: tc.haproxyDeb}, dpkg("keepalived"): {out: tc.keepalivedDeb}, dpkg("ipvsadm"): {out: tc.ipvsDeb},
			}}
			if got := LookupVersions(context.Background(), deb, osRelease, "/usr/sbin/haproxy"); got != tc.wantDeb {
				t.Errorf("from dpkg: %+v, want %+v", got, tc.wantDeb)
			}
			// ipvsadm --version fails where the kernel has no IPVS, as
			// here; both releases print the same two lines then.
			bin := &fakeRunner{
				results: map[string]fakeResult{
					"/usr/sbin/haproxy -v": {out: banner(tc.haproxyBanner)},
					"keepalived -v":        {},
					"ipvsadm --version":    {err: errExit1},
				},
				stderr: map[string]string{
					"keepalived -v":     banner(tc.keepalivedBanner),
					"ipvsadm --version": "Can't initialize ipvs: Protocol not available\nAre you sure that IP Virtual Server is built in the kernel or as module?\n",
				},
			}
			if got := LookupVersions(context.Background(), bin, writeOSRelease(t, unknownOS), "/usr/sbin/haproxy"); got != tc.wantBanner {
				t.Errorf("from the banners: %+v, want %+v", got, tc.wantBanner)
			}
		})
	}
}
