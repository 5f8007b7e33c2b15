package config

import (
	"encoding/json"
	"fmt"
)

// mainPlugin is what tenure reads of the main plugin's keys at the top
// level of the network config: where its segment meets the node. The
// values are decoded only for the plugin types that define them; other
// plugins' keys of the same names are theirs.
type mainPlugin struct {
	Type   string          `json:"type"`
	Master json.RawMessage `json:"master"`
	Bridge json.RawMessage `json:"bridge"`
	Mode   json.RawMessage `json:"mode"`
	VLAN   json.RawMessage `json:"vlan"`
}

// parseProbeKeys reads probe and probe_interface and finds the interface
// the agent probes the segment on (Config.Probe).
func (c *Config) parseProbeKeys(k *ipamKeys, netconf []byte) error {
	c.Probe = !k.Probe.ok() || k.Probe.get()
	if !c.Probe {
		return nil
	}
	if k.ProbeInterface.ok() {
		name := k.ProbeInterface.get()
		if !validIfName(name) {
			return k.ProbeInterface.errorf(ifNameRule)
		}
		c.ProbeInterface = name
		return nil
	}
	var m mainPlugin
	if err := json.Unmarshal(netconf, &m); err != nil {
		// decodeConfig accepted the JSON; only a member's type can differ.
		return &Error{Key: "netconf", Reason: fmt.Sprintf("reading the main plugin's keys: %v", err)}
	}
	str := func(key string, raw json.RawMessage) (string, error) {
		if len(raw) == 0 || string(raw) == "null" {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", &Error{Key: key, Value: show(raw), Reason: fmt.Sprintf("must be a string (the %s plugin's interface, which tenure probes the segment on)", m.Type)}
		}
		if s != "" {
			if !validIfName(s) {
				return "", &Error{Key: key, Value: quote(s), Reason: ifNameRule}
			}
		}
		return s, nil
	}
	switch m.Type {
	case "macvlan", "ipvlan":
		if m.Type == "ipvlan" {
			if mode, _ := str("mode", m.Mode); mode == "l3" || mode == "l3s" {
				c.ProbeSkipped = "ipvlan in mode " + mode + " has no ARP or neighbour discovery on the segment"
				return nil
			}
		}
		master, err := str("master", m.Master)
		if err != nil {
			return err
		}
		c.ProbeInterface, c.ProbeDefaultRoute = master, master == ""
	case "bridge":
		if len(m.VLAN) > 0 && string(m.VLAN) != "null" && string(m.VLAN) != "0" {
			c.ProbeSkipped = "the bridge's ports are on VLAN " + string(m.VLAN) + ", which the bridge itself does not send on; set ipam.probe_interface to an interface on that VLAN"
			return nil
		}
		bridge, err := str("bridge", m.Bridge)
		if err != nil {
			return err
		}
		if bridge == "" {
			bridge = "cni0" // the bridge plugin's default
		}
		c.ProbeInterface = bridge
	case "":
		c.ProbeSkipped = "the network config names no main plugin type"
	default:
		c.ProbeSkipped = "tenure does not know where the " + m.Type + " plugin's segment meets the node; set ipam.probe_interface"
	}
	return nil
}

const ifNameRule = "must be a Linux interface name (1 to 15 bytes, no '/', ':' or whitespace)"
