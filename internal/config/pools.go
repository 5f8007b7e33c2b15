package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tenure-ipam/tenure/api/v1alpha1"
)

// Placement is where a pod runs, as a pools list's selectors see it: its
// namespace and node, with their labels.
type Placement struct {
	Namespace       string
	NamespaceLabels map[string]string
	Node            string
	NodeLabels      map[string]string
}

// PoolVerdict says why one pool of a pools list serves, or does not serve,
// one address family of an ADD.
type PoolVerdict struct {
	Pool   string `json:"pool"`
	Family string `json:"family"` // "IPv4" or "IPv6"
	Chosen bool   `json:"chosen"`
	Reason string `json:"reason"`
}

// PoolChoice is what SelectPools decided: per family the pool chosen, and a
// verdict for every pool of the list and every family the list serves, in
// family then list order.
type PoolChoice struct {
	Chosen   map[string]string // family -> pool
	Verdicts []PoolVerdict
}

// familyOrder is the order families are chosen in and their ranges follow
// in the chosen configuration.
var familyOrder = []bool{true, false} // IPv4, IPv6

// candidate is one pool of the list as SelectPools reads it.
type candidate struct {
	name     string
	spec     *v1alpha1.IPPoolSpec // nil: no IPPool of that name
	families map[bool]bool        // is4 -> has a range of that family
	prefixes []netip.Prefix       // of its ranges
}

// SelectPools chooses, for a config with a pools list, per address family
// the pool that serves an ADD of a pod placed at, and returns the config
// with those pools' ranges (ApplyPool of each, restricted to the families
// it serves). specs holds the listed IPPools that exist; a name it lacks
// has no IPPool.
//
// A family is chosen as:
//   - the pool one of whose ranges holds an address of held, the addresses
//     the pod's claim records or its attachment holds (a retried ADD): a
//     claim keeps the pool its first ADD chose, wherever its pod runs, and
//     nothing held moves whatever the selectors say now;
//   - else the first pool of the list with a range of the family whose
//     namespaceSelector selects at's namespace and whose nodeSelector
//     selects at's node (an unset or empty selector selects all).
//
// Every family a listed pool has a range of must be served: one no pool
// serves is an *Error naming the namespace, the node and the pools tried,
// as is a selector that does not parse. On error c is unchanged.
func (c *Config) SelectPools(specs map[string]*v1alpha1.IPPoolSpec, at Placement, held []netip.Addr) (*Config, PoolChoice, error) {
	choice := PoolChoice{Chosen: map[string]string{}}
	if len(c.Pools) == 0 {
		return nil, choice, &Error{Key: "ipam.pools", Reason: "the config names no pools list"}
	}
	listKey := c.own.pool
	cands := make([]candidate, 0, len(c.Pools))
	for _, name := range c.Pools {
		cd := candidate{name: name, spec: specs[name], families: map[bool]bool{}}
		if cd.spec != nil {
			for i, pr := range cd.spec.Ranges {
				b, err := poolRange(fmt.Sprintf("IPPool %s spec.ranges[%d]", name, i), pr)
				if err != nil {
					return nil, choice, err
				}
				cd.families[b.r.Prefix.Addr().Is4()] = true
				cd.prefixes = append(cd.prefixes, b.r.Prefix.Masked())
			}
		}
		cands = append(cands, cd)
	}
	served := 0
	for _, is4 := range familyOrder {
		fam := familyName(is4)
		if !slices.ContainsFunc(cands, func(cd candidate) bool { return cd.families[is4] }) {
			continue
		}
		served++
		chosen, verdicts, err := chooseFamily(cands, is4, at, held)
		if err != nil {
			return nil, choice, err
		}
		choice.Verdicts = append(choice.Verdicts, verdicts...)
		if chosen == "" {
			var tried []string
			for _, v := range verdicts {
				tried = append(tried, v.Pool+" ("+v.Reason+")")
			}
			return nil, choice, listKey.errorf("no pool serves the %s address of a pod in namespace %s on node %s: tried %s",
				fam, at.Namespace, at.Node, strings.Join(tried, "; "))
		}
		choice.Chosen[fam] = chosen
	}
	if served == 0 {
		var why []string
		for _, cd := range cands {
			if cd.spec == nil {
				why = append(why, cd.name+" (no IPPool of that name)")
			} else {
				why = append(why, cd.name+" (no range)")
			}
		}
		return nil, choice, listKey.errorf("no listed pool has a range: %s", strings.Join(why, "; "))
	}
	n, err := c.applyChosen(cands, choice)
	if err != nil {
		return nil, choice, err
	}
	return n, choice, nil
}

// chooseFamily picks the pool serving family is4, with a verdict for every
// pool of the list. Every pool's own reason is worked out, so a verdict
// says why a pool passed over would not have served either; a selector
// that does not parse fails the choice only when no pool before it was
// chosen.
func chooseFamily(cands []candidate, is4 bool, at Placement, held []netip.Addr) (string, []PoolVerdict, error) {
	fam := familyName(is4)
	verdicts := make([]PoolVerdict, len(cands))
	ok := make([]bool, len(cands))
	errs := make([]error, len(cands))
	for i, cd := range cands {
		v := &verdicts[i]
		*v = PoolVerdict{Pool: cd.name, Family: fam}
		switch {
		case cd.spec == nil:
			v.Reason = "no IPPool of that name"
		case !cd.families[is4]:
			v.Reason = "has no " + fam + " range"
		default:
			ok[i], v.Reason, errs[i] = selects(cd, at)
			if errs[i] != nil {
				v.Reason = errs[i].Error()
			}
		}
	}
	// A held address decides before any selector.
	for _, a := range held {
		if a.Is4() != is4 {
			continue
		}
		for i, cd := range cands {
			if !slices.ContainsFunc(cd.prefixes, func(p netip.Prefix) bool { return p.Contains(a) }) {
				continue
			}
			for j := range verdicts {
				if j != i {
					verdicts[j].Reason = fmt.Sprintf("the held address %s is in %s; %s", a, cd.name, otherwise(verdicts[j].Reason, ok[j]))
				}
			}
			verdicts[i].Chosen, verdicts[i].Reason = true, fmt.Sprintf("holds %s, which the claim or attachment holds already: a held address keeps its pool wherever its pod runs and whatever the selectors say now", a)
			return cd.name, verdicts, nil
		}
	}
	for i, cd := range cands {
		if errs[i] != nil {
			return "", nil, errs[i]
		}
		if !ok[i] {
			continue
		}
		verdicts[i].Chosen = true
		for j := i + 1; j < len(cands); j++ {
			verdicts[j].Reason = fmt.Sprintf("comes after %s in the list; %s", cd.name, otherwise(verdicts[j].Reason, ok[j]))
		}
		return cd.name, verdicts, nil
	}
	return "", verdicts, nil
}

// otherwise is a pool's own reason, said of a pool another one beat.
func otherwise(reason string, selected bool) string {
	if selected {
		return "it selects the pod too"
	}
	return reason
}

// selects reports whether cd's selectors select at, and says why.
func selects(cd candidate, at Placement) (bool, string, error) {
	ns, err := selector("IPPool "+cd.name+" spec.namespaceSelector", cd.spec.NamespaceSelector)
	if err != nil {
		return false, "", err
	}
	node, err := selector("IPPool "+cd.name+" spec.nodeSelector", cd.spec.NodeSelector)
	if err != nil {
		return false, "", err
	}
	if !ns.Matches(labels.Set(at.NamespaceLabels)) {
		return false, fmt.Sprintf("spec.namespaceSelector %s does not select namespace %s", ns, at.Namespace), nil
	}
	if !node.Matches(labels.Set(at.NodeLabels)) {
		return false, fmt.Sprintf("spec.nodeSelector %s does not select node %s", node, at.Node), nil
	}
	return true, fmt.Sprintf("the first pool of the list whose selectors select namespace %s (%s) and node %s (%s)",
		at.Namespace, orAll(ns), at.Node, orAll(node)), nil
}

// selector converts s; unset or empty selects everything.
func selector(key string, s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		raw, _ := json.Marshal(s)
		return nil, &Error{Key: key, Value: show(raw), Reason: fmt.Sprintf("does not parse: %v", err)}
	}
	return sel, nil
}

// CheckSelectors refuses an IPPool spec whose selectors do not parse,
// naming the field and the value.
func CheckSelectors(name string, spec v1alpha1.IPPoolSpec) error {
	if _, err := selector("IPPool "+name+" spec.namespaceSelector", spec.NamespaceSelector); err != nil {
		return err
	}
	_, err := selector("IPPool "+name+" spec.nodeSelector", spec.NodeSelector)
	return err
}

func orAll(s labels.Selector) string {
	if s.Empty() {
		return "any"
	}
	return s.String()
}

// applyChosen returns c with the chosen pools applied: each pool with the
// ranges of the families it serves (and its delegation pool when it serves
// IPv6), the ranges in family order.
func (c *Config) applyChosen(cands []candidate, choice PoolChoice) (*Config, error) {
	var parts []*Config
	for _, cd := range cands {
		var fams []bool
		for _, is4 := range familyOrder {
			if choice.Chosen[familyName(is4)] == cd.name {
				fams = append(fams, is4)
			}
		}
		if len(fams) == 0 {
			continue
		}
		spec := *cd.spec
		spec.Ranges = nil
		for _, pr := range cd.spec.Ranges {
			if b, err := poolRange("", pr); err == nil && slices.Contains(fams, b.r.Prefix.Addr().Is4()) {
				spec.Ranges = append(spec.Ranges, pr)
			}
		}
		if !slices.Contains(fams, false) && choice.Chosen[familyName(false)] != "" {
			spec.PrefixDelegation = nil
		}
		p := c.Clone()
		p.own.requested = slices.DeleteFunc(p.own.requested, func(q requestedIP) bool { return !slices.Contains(fams, q.addr.Is4()) })
		if err := p.ApplyPool(cd.name, spec); err != nil {
			return nil, err
		}
		if !slices.Contains(fams, false) && choice.Chosen[familyName(false)] != "" {
			p.PrefixDelegation = nil // the config's own: delegated beside the IPv6 pool's ranges
		}
		parts = append(parts, p)
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	// Parts in list order; the ranges in family order, as one pool's are.
	slices.SortStableFunc(parts, func(x, y *Config) int {
		if x.Ranges[0].Prefix.Addr().Is4() == y.Ranges[0].Prefix.Addr().Is4() {
			return 0
		}
		if x.Ranges[0].Prefix.Addr().Is4() {
			return -1
		}
		return 1
	})
	n := parts[0].Clone()
	n.Pool, n.Ranges, n.Requested, n.PrefixDelegation = "", nil, nil, nil
	requested := false
	for _, p := range parts {
		n.Ranges = append(n.Ranges, p.Ranges...)
		requested = requested || p.Requested != nil
		if p.PrefixDelegation != nil {
			n.PrefixDelegation = p.PrefixDelegation
		}
		if p.Gateway.Is6() {
			n.Gateway = p.Gateway // the dataplane's Router Advertisements name the IPv6 one
		}
	}
	if requested {
		for _, p := range parts {
			n.Requested = append(n.Requested, p.Requested...)
			for range len(p.Ranges) - len(p.Requested) {
				n.Requested = append(n.Requested, netip.Addr{})
			}
		}
	}
	n.parts = parts
	return n, nil
}
