package cpisuite

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestSettingsMiss(t *testing.T) {
	env := json.RawMessage(`{"bosh":{"group":"cpilab","mbus":{"cert":{"ca":"CA"}}}}`)
	nets := json.RawMessage(`{"private":{"type":"manual","ip":"10.0.0.5","netmask":"255.255.255.0","gateway":"10.0.0.1","default":["dns","gateway"]}}`)
	base := func() map[string]any {
		var m map[string]any
		_ = json.Unmarshal([]byte(`{"agent_id":"agent-1","env":{"bosh":{"group":"cpilab","mbus":{"cert":{"ca":"CA"}}}},
			"networks":{"private":{"type":"manual","ip":"10.0.0.5","netmask":"255.255.255.0","gateway":"10.0.0.1","default":["dns","gateway"]}}}`), &m)
		return m
	}
	for _, c := range []struct {
		name string
		edit func(m map[string]any)
		want string // a substring of the complaint; "" for none
	}{
		{"as given", func(map[string]any) {}, ""},
		{"members added by the CPI", func(m map[string]any) {
			m["env"].(map[string]any)["bosh"].(map[string]any)["ipv6"] = map[string]any{"enable": false}
			m["networks"].(map[string]any)["private"].(map[string]any)["mac"] = "00:50:56:00:00:01"
		}, ""},
		{"wrong agent", func(m map[string]any) { m["agent_id"] = "agent-2" }, "agent_id"},
		{"env dropped", func(m map[string]any) { m["env"] = map[string]any{} }, "env is"},
		{"env member changed", func(m map[string]any) {
			m["env"].(map[string]any)["bosh"].(map[string]any)["mbus"] = map[string]any{}
		}, "env is"},
		{"network renamed", func(m map[string]any) {
			m["networks"] = map[string]any{"eth0": m["networks"].(map[string]any)["private"]}
		}, `network "private" is missing`},
		{"ip dropped", func(m map[string]any) {
			delete(m["networks"].(map[string]any)["private"].(map[string]any), "ip")
		}, "has ip"},
		{"type changed", func(m map[string]any) {
			m["networks"].(map[string]any)["private"].(map[string]any)["type"] = "dynamic"
		}, "has type"},
	} {
		m := base()
		c.edit(m)
		got := settingsMiss(m, "agent-1", env, nets)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: settingsMiss = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestFullSettingsPrefersTheRegistryAndNeedsAnAgentID(t *testing.T) {
	full := json.RawMessage(`{"agent_id":"a"}`)
	pointer := json.RawMessage(`{"registry":{"endpoint":"http://127.0.0.1/registry"}}`)
	for _, c := range []struct {
		s     OracleSettings
		where string
	}{
		{OracleSettings{Registry: full, UserData: pointer}, "registry"},
		{OracleSettings{UserData: full}, "user-data"},
		{OracleSettings{UserData: pointer}, ""},
		{OracleSettings{}, ""},
	} {
		m, where := fullSettings(c.s)
		if where != c.where || (m == nil) != (c.where == "") {
			t.Errorf("fullSettings(%s, %s) = %v, %q; want %q", c.s.Registry, c.s.UserData, m, where, c.where)
		}
	}
}
