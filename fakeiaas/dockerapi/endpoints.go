package dockerapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/moby/moby/api/types/network"
)

// A container's network endpoints, as Docker keeps them: what the create
// request configured (IPAM config, aliases, links, the network's ID when
// given), then, while the container runs, the live state a start assigns
// (endpoint ID, gateway, address, prefix length, MAC address); a kill or
// stop takes the live state away again, keeping the network's ID. Docker
// looks the networks up at start, not at create, and refuses to start a
// second running container on an address in use.

// configuredEndpoint is the part of ep a container create keeps.
func configuredEndpoint(ep *network.EndpointSettings) *network.EndpointSettings {
	if ep == nil {
		return &network.EndpointSettings{}
	}
	out := &network.EndpointSettings{Links: ep.Links, Aliases: ep.Aliases, DriverOpts: ep.DriverOpts,
		GwPriority: ep.GwPriority, NetworkID: ep.NetworkID}
	if ep.IPAMConfig != nil {
		c := *ep.IPAMConfig
		out.IPAMConfig = &c
	}
	return out
}

// connectLocked returns c's endpoints with the live state of a start, or
// Docker's error: 404 for a network that does not exist, 403 "Address
// already in use" when a running container holds the address.
func (f *Face) connectLocked(c *ctr) (map[string]*network.EndpointSettings, error) {
	out := map[string]*network.EndpointSettings{}
	for _, name := range sortedKeys(c.Endpoints) {
		ep := configuredEndpoint(c.Endpoints[name])
		n := f.lookupNetworkLocked(name)
		if n == nil {
			return nil, errorf(http.StatusNotFound, "network %s not found", name)
		}
		ep.NetworkID = n.ID
		f.seq++
		sum := sha256.Sum256(fmt.Appendf(nil, "cpilab-endpoint:%s:%s:%d", c.VM, n.Name, f.seq))
		ep.EndpointID = hex.EncodeToString(sum[:])
		if pfx, err := netip.ParsePrefix(n.Subnet); err == nil && pfx.Addr().Is4() {
			pfx = pfx.Masked()
			var ip netip.Addr
			if ep.IPAMConfig != nil && ep.IPAMConfig.IPv4Address.IsValid() {
				ip = ep.IPAMConfig.IPv4Address
				if !pfx.Contains(ip) {
					return nil, errorf(http.StatusBadRequest, "no available IPv4 addresses on this network's address pools: %s (%s): the address %s is outside the subnet %s", n.Name, n.ID, ip, pfx)
				}
				if f.addressInUseLocked(c, n.ID, ip) {
					return nil, errorf(http.StatusForbidden, "Address already in use")
				}
			} else {
				ip = f.freeAddressLocked(c, n.ID, pfx)
				if !ip.IsValid() {
					return nil, errorf(http.StatusForbidden, "no available IPv4 addresses on this network's address pools: %s (%s)", n.Name, n.ID)
				}
			}
			ep.Gateway = pfx.Addr().Next()
			ep.IPAddress = ip
			ep.IPPrefixLen = pfx.Bits()
			a := ip.As4()
			ep.MacAddress = network.HardwareAddr{0x02, 0x42, a[0], a[1], a[2], a[3]}
		}
		out[name] = ep
	}
	return out, nil
}

// addressInUseLocked reports whether a running container other than c
// holds ip on the network with ID netID.
func (f *Face) addressInUseLocked(c *ctr, netID string, ip netip.Addr) bool {
	for _, o := range f.containers {
		if o == c || !o.Running {
			continue
		}
		for _, ep := range o.Endpoints {
			if ep != nil && ep.NetworkID == netID && ep.IPAddress == ip {
				return true
			}
		}
	}
	return false
}

// freeAddressLocked is the lowest address of pfx after its gateway that no
// running container holds, or the zero Addr.
func (f *Face) freeAddressLocked(c *ctr, netID string, pfx netip.Prefix) netip.Addr {
	ip := pfx.Addr().Next() // the gateway
	for ip = ip.Next(); pfx.Contains(ip); ip = ip.Next() {
		if !pfx.Contains(ip.Next()) { // the broadcast address
			break
		}
		if !f.addressInUseLocked(c, netID, ip) {
			return ip
		}
	}
	return netip.Addr{}
}

// defaultPools are Docker's default address pools (libnetwork
// ipamutils): 172.17.0.0/16 to 172.31.0.0/16, then 192.168.0.0/16 in /20s.
func defaultPools() []netip.Prefix {
	var out []netip.Prefix
	for b := 17; b <= 31; b++ {
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{172, byte(b), 0, 0}), 16))
	}
	for c := 0; c < 256; c += 16 {
		out = append(out, netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 168, byte(c), 0}), 20))
	}
	return out
}

// defaultPoolLocked is the first default pool no network of the face
// overlaps ("" when all are taken).
func (f *Face) defaultPoolLocked() string {
	for _, p := range defaultPools() {
		free := true
		for _, n := range f.networks {
			if o, err := netip.ParsePrefix(n.Subnet); err == nil && o.Overlaps(p) {
				free = false
			}
		}
		if free {
			return p.String()
		}
	}
	return ""
}

// disconnectLocked takes the live state off c's endpoints (kill, stop).
func (f *Face) disconnectLocked(c *ctr) {
	for name, ep := range c.Endpoints {
		c.Endpoints[name] = configuredEndpoint(ep)
	}
}
