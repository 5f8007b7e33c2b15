package agent

import (
	"k8s.io/utils/lru"

	"github.com/tenure-ipam/tenure/internal/config"
)

// netconfCacheSize bounds the parsed network configs the agent keeps: one
// per distinct (network config, flat file) a node's attachments send,
// which is one per network per node unless runtimeConfig differs per pod.
const netconfCacheSize = 256

// netconfCache holds config.Parse's result, error included, for each
// distinct pair of bytes: Parse is a pure function of them, and every ADD,
// DEL and CHECK of a network sends the same ones. The key is the bytes
// themselves, so a hit is an exact match, never a hash collision.
//
// The cached *config.Config is never handed out: get returns a Clone, so a
// caller may change its config (ApplyPool does) while other calls read the
// cached one.
type netconfCache struct {
	lru   *lru.Cache
	parse func(netconf, flat []byte) (*config.Config, error)
}

type netconfKey struct{ netconf, flat string }

type parsed struct {
	cfg *config.Config
	err error
}

func newNetconfCache(size int) *netconfCache {
	return &netconfCache{lru: lru.New(size), parse: config.Parse}
}

func (c *netconfCache) get(netconf, flat []byte) (*config.Config, error) {
	k := netconfKey{string(netconf), string(flat)}
	if v, ok := c.lru.Get(k); ok {
		p := v.(parsed)
		return p.cfg.Clone(), p.err
	}
	// Parsed from the key's own copy of the bytes, which no caller holds:
	// the config's messages may keep slices of them.
	cfg, err := c.parse([]byte(k.netconf), []byte(k.flat))
	c.lru.Add(k, parsed{cfg, err})
	return cfg.Clone(), err
}
