package config

import (
	"cmp"
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

type domainYAML struct {
	Domain      string       `yaml:"domain"`
	Descriptors []*yaml.Node `yaml:"descriptors"`
}

type descriptorYAML struct {
	Key            string       `yaml:"key"`
	Value          string       `yaml:"value"`
	RateLimit      *yaml.Node   `yaml:"rate_limit"`
	RateLimits     []*yaml.Node `yaml:"rate_limits"` // sluice: several limits, all-or-nothing
	Descriptors    []*yaml.Node `yaml:"descriptors"`
	ShadowMode     bool         `yaml:"shadow_mode"`
	DetailedMetric bool         `yaml:"detailed_metric"`
	Name           string       `yaml:"name"`
}

type rateLimitYAML struct {
	Unit            string        `yaml:"unit"`
	RequestsPerUnit *int64        `yaml:"requests_per_unit"`
	Unlimited       bool          `yaml:"unlimited"`
	Name            string        `yaml:"name"`
	Replaces        []replaceYAML `yaml:"replaces"`
	Algorithm       string        `yaml:"algorithm"` // sluice: the algorithm, default GCRA
	Burst           int64         `yaml:"burst"`     // sluice: the burst
}

type replaceYAML struct {
	Name string `yaml:"name"`
}

func (c *checker) domain(n *yaml.Node, field string) *Domain {
	var y domainYAML
	c.decodeInto(n, field, &y)
	d := &Domain{Name: y.Domain}
	if d.Name == "" {
		c.add(n, join(field, "domain"), "required")
		return nil
	}
	d.Descriptors = c.descriptors(y.Descriptors, join(field, "descriptors"))
	return d
}

func (c *checker) descriptors(nodes []*yaml.Node, field string) []*Descriptor {
	var out []*Descriptor
	seen := map[string]bool{}
	for i, dn := range nodes {
		f := fmt.Sprintf("%s[%d]", field, i)
		var y descriptorYAML
		c.decodeInto(dn, f, &y)
		d := &Descriptor{Key: y.Key, Value: y.Value, Shadow: y.ShadowMode}
		if d.Key == "" {
			c.add(dn, f+".key", "required")
		}
		if id := d.Key + "\x00" + d.Value; seen[id] {
			c.add(dn, f, "descriptor key %q value %q appears twice at this level", d.Key, d.Value)
		} else {
			seen[id] = true
		}
		if y.RateLimit != nil {
			c.rateLimit(y.RateLimit, f+".rate_limit", d)
		}
		for j, rn := range y.RateLimits {
			c.rateLimit(rn, fmt.Sprintf("%s.rate_limits[%d]", f, j), d)
		}
		d.Children = c.descriptors(y.Descriptors, f+".descriptors")
		out = append(out, d)
	}
	return out
}

// rateLimit reads envoyproxy/ratelimit's rate_limit: unit and
// requests_per_unit, or unlimited; name and replaces; and sluice's
// optional algorithm and burst.
func (c *checker) rateLimit(n *yaml.Node, field string, d *Descriptor) {
	var y rateLimitYAML
	m := c.decodeInto(n, field, &y)
	for _, r := range y.Replaces {
		if r.Name != "" {
			d.Replaces = append(d.Replaces, r.Name)
		}
	}
	if y.Unlimited {
		d.Unlimited = true
		return
	}
	r := RateLimit{Name: y.Name, Unit: strings.ToLower(y.Unit)}
	period, ok := units[r.Unit]
	if !ok {
		c.add(cmp.Or(m["unit"], n), field+".unit", "%q: want second, minute, hour, day, week, month or year", r.Unit)
	}
	if y.RequestsPerUnit == nil {
		c.add(n, field+".requests_per_unit", "required (or unlimited: true)")
	} else {
		r.Rate = *y.RequestsPerUnit
	}
	r.Limit = sluice.Limit{Rate: r.Rate, Period: period, Burst: y.Burst}
	if y.Algorithm != "" {
		a, err := sluice.ParseAlgorithm(y.Algorithm)
		if err != nil {
			c.add(cmp.Or(m["algorithm"], n), field+".algorithm", "%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
		r.Limit.Algorithm = a
	}
	if ok && y.RequestsPerUnit != nil {
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
