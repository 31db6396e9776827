package dockerapi

import (
	"errors"
	"net/http"
	"testing"
)

func TestParseBind(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bind
		msg  string // the 400 message when refused
	}{
		{in: "vol-1:/warden-cpi-dev/vol-1", want: bind{Source: "vol-1", Target: "/warden-cpi-dev/vol-1", Volume: true}},
		{in: "vol-eph-c-1:/var/vcap/data/", want: bind{Source: "vol-eph-c-1", Target: "/var/vcap/data", Volume: true}},
		{in: "/sys/fs/cgroup:/sys/fs/cgroup:rw", want: bind{Source: "/sys/fs/cgroup", Target: "/sys/fs/cgroup", Mode: "rw"}},
		{in: "vol-1", msg: `invalid volume specification: "vol-1": want SOURCE:TARGET[:MODE]`},
		{in: "a:b:c:d", msg: `invalid volume specification: "a:b:c:d": want SOURCE:TARGET[:MODE]`},
		{in: "vol-1:data", msg: `invalid volume specification: "vol-1:data": mount path "data" must be absolute`},
		{in: "vol-1:/a/../../etc", msg: `invalid volume specification: "vol-1:/a/../../etc": mount path "/a/../../etc" contains '..'`},
		{in: "vol-1:/", msg: `invalid volume specification: "vol-1:/": destination can't be '/'`},
		{in: "../x:/data", msg: `invalid volume specification: "../x:/data": "../x" includes invalid characters for a local volume name, only "[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed`},
	} {
		got, err := parseBind(tc.in)
		if tc.msg != "" {
			var ae *apiError
			if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Msg != tc.msg {
				t.Errorf("parseBind(%q) = %+v, %v; want 400 %q", tc.in, got, err, tc.msg)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseBind(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseExec(t *testing.T) {
	for _, tc := range []struct {
		cmd  []string
		want execCmd
		ok   bool
	}{
		{[]string{"tar", "-c", "-f", "-", "-C", "/var/vcap/bosh", "--", "warden-cpi-agent-env.json"}, execCmd{Kind: execTarCreate, Dir: "/var/vcap/bosh", Name: "warden-cpi-agent-env.json"}, true},
		{[]string{"tar", "-x", "-f", "-", "-C", "/"}, execCmd{Kind: execTarExtract, Dir: "/"}, true},
		{[]string{"bash", "-c", "chgrp vcap /var/vcap/instance/dns/records.json"}, execCmd{Kind: execChgrp, Name: "/var/vcap/instance/dns/records.json"}, true},
		{[]string{"tar", "-c", "-f", "-", "-C", "/var/../etc", "--", "passwd"}, execCmd{}, false},
		{[]string{"tar", "-c", "-f", "-", "-C", "/", "--", ".."}, execCmd{}, false},
		{[]string{"tar", "-x", "-f", "/etc/passwd", "-C", "/"}, execCmd{}, false},
		{[]string{"bash", "-c", "chgrp vcap /x; rm -rf /"}, execCmd{}, false},
		{[]string{"bash", "-c", "chgrp vcap /a/../b"}, execCmd{}, false},
		{[]string{"sh", "-c", "true"}, execCmd{}, false},
		{nil, execCmd{}, false},
	} {
		got, ok := parseExec(tc.cmd)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseExec(%q) = %+v, %v; want %+v, %v", tc.cmd, got, ok, tc.want, tc.ok)
		}
	}
}
