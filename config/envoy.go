package config

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
)

// Domain is an envoyproxy/ratelimit domain: a tree of descriptors.
type Domain struct {
	Name        string
	Descriptors []*Descriptor
}

// Descriptor is one node of the tree: a key, an optional value (a trailing
// "*" makes it a prefix), and the limits that apply when a request's
// descriptor ends here.
type Descriptor struct {
	Key, Value string
	Limits     []RateLimit // rate_limit, and sluice's rate_limits extension
	Unlimited  bool
	Shadow     bool
	Replaces   []string // names of limits this one replaces
	Children   []*Descriptor
}

// RateLimit is one limit of a descriptor.
type RateLimit struct {
	Name  string // for replaces
	Limit sluice.Limit
	Unit  string // as written: second, minute, hour, day, ...
	Rate  int64  // requests_per_unit
}

var units = map[string]time.Duration{
	"second": time.Second, "minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour,
	"week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
}

func (c *checker) domain(n *yaml.Node, field string) *Domain {
	m := c.mapping(n, field, "domain", "descriptors")
	d := &Domain{Name: c.str(m["domain"], join(field, "domain"))}
	if d.Name == "" {
		c.add(n, join(field, "domain"), "required")
		return nil
	}
	d.Descriptors = c.descriptors(m["descriptors"], join(field, "descriptors"))
	return d
}

func (c *checker) descriptors(n *yaml.Node, field string) []*Descriptor {
	var out []*Descriptor
	seen := map[string]bool{}
	for i, dn := range c.sequence(n, field) {
		f := fmt.Sprintf("%s[%d]", field, i)
		m := c.mapping(dn, f, "key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "detailed_metric", "name")
		d := &Descriptor{Key: c.str(m["key"], f+".key"), Value: c.str(m["value"], f+".value")}
		if d.Key == "" {
			c.add(dn, f+".key", "required")
		}
		if id := d.Key + "\x00" + d.Value; seen[id] {
			c.add(dn, f, "descriptor key %q value %q appears twice at this level", d.Key, d.Value)
		} else {
			seen[id] = true
		}
		if m["rate_limit"] != nil {
			c.rateLimit(m["rate_limit"], f+".rate_limit", d)
		}
		for j, rn := range c.sequence(m["rate_limits"], f+".rate_limits") {
			c.rateLimit(rn, fmt.Sprintf("%s.rate_limits[%d]", f, j), d)
		}
		c.decode(m["shadow_mode"], f+".shadow_mode", &d.Shadow)
		d.Children = c.descriptors(m["descriptors"], f+".descriptors")
		out = append(out, d)
	}
	return out
}

// rateLimit reads envoyproxy/ratelimit's rate_limit: unit and
// requests_per_unit, or unlimited; name and replaces; and sluice's
// optional algorithm and burst.
func (c *checker) rateLimit(n *yaml.Node, field string, d *Descriptor) {
	m := c.mapping(n, field, "unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst")
	var unlimited bool
	c.decode(m["unlimited"], field+".unlimited", &unlimited)
	for i, rn := range c.sequence(m["replaces"], field+".replaces") {
		rm := c.mapping(rn, fmt.Sprintf("%s.replaces[%d]", field, i), "name")
		if name := c.str(rm["name"], fmt.Sprintf("%s.replaces[%d].name", field, i)); name != "" {
			d.Replaces = append(d.Replaces, name)
		}
	}
	if unlimited {
		d.Unlimited = true
		return
	}
	r := RateLimit{Name: c.str(m["name"], field+".name"), Unit: strings.ToLower(c.str(m["unit"], field+".unit"))}
	period, ok := units[r.Unit]
	if !ok {
		c.add(m["unit"], field+".unit", "%q: want second, minute, hour, day, week, month or year", r.Unit)
	}
	if !c.decode(m["requests_per_unit"], field+".requests_per_unit", &r.Rate) {
		if m["requests_per_unit"] == nil {
			c.add(n, field+".requests_per_unit", "required (or unlimited: true)")
		}
	}
	r.Limit = sluice.Limit{Rate: r.Rate, Period: period}
	if v := c.str(m["algorithm"], field+".algorithm"); v != "" {
		a, err := sluice.ParseAlgorithm(v)
		if err != nil {
			c.add(m["algorithm"], field+".algorithm", "%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
		r.Limit.Algorithm = a
	}
	c.decode(m["burst"], field+".burst", &r.Limit.Burst)
	if ok {
		if err := r.Limit.Validate(); err != nil {
			c.add(n, field, "%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
	}
	d.Limits = append(d.Limits, r)
}

// Entry is one key/value of a request's descriptor.
type Entry struct{ Key, Value string }

// Match walks the domain's tree along entries, as envoyproxy/ratelimit
// does: at each level an entry matches a node with its key and value,
// else a node whose value is a prefix ending in "*", else a node with its
// key and no value (any value). It returns the node the entries end at, or
// nil when they leave the tree.
func (d *Domain) Match(entries []Entry) *Descriptor {
	level := d.Descriptors
	var node *Descriptor
	for _, e := range entries {
		node = nil
		var prefix, any *Descriptor
		for _, n := range level {
			switch {
			case n.Key != e.Key:
			case n.Value == e.Value:
				node = n
			case strings.HasSuffix(n.Value, "*") && strings.HasPrefix(e.Value, strings.TrimSuffix(n.Value, "*")):
				prefix = n
			case n.Value == "":
				any = n
			}
		}
		if node == nil {
			node = prefix
		}
		if node == nil {
			node = any
		}
		if node == nil {
			return nil
		}
		level = node.Children
	}
	return node
}
