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

// Descriptor is one node of the tree: a key, an optional value (each "*"
// in it matches any run of characters, as envoyproxy/ratelimit matches
// them), and the limits that apply when a request's descriptor ends here.
type Descriptor struct {
	Key, Value string
	Limits     []RateLimit // rate_limit, and sluice's rate_limits extension
	Unlimited  bool
	Shadow     bool     // shadow_mode: decided and counted, never OVER_LIMIT
	QuotaMode  bool     // quota_mode: OVER_LIMIT overall only when every quota descriptor is over
	Replaces   []string // names of limits this one replaces
	Children   []*Descriptor
	// ShareThreshold makes every value that matches this node's wildcard
	// share one counter (share_threshold).
	ShareThreshold bool
	// FullKey names the node in metrics as envoyproxy/ratelimit names it:
	// the domain and each level's key_value, joined with dots.
	FullKey string
	// DetailedMetric and ValueToMetric name a request's series by its own
	// values instead of FullKey (sluice_envoy_descriptor_checks_total,
	// capped).
	DetailedMetric, ValueToMetric bool

	parts []string // Value split on "*" when it has one
}

// RateLimit is one limit of a descriptor.
type RateLimit struct {
	Name  string // for replaces, and current_limit.name
	Limit sluice.Limit
	Unit  string // as written: second, minute, hour, day, ...
	// Units is unit_multiplier: the period is this many Units, 1 unless
	// the limit says otherwise.
	Units uint32
	Rate  int64 // requests_per_unit
	// Block is requests_per_unit: 0: every request is over the limit,
	// decided without the store.
	Block bool
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
	QuotaMode      bool         `yaml:"quota_mode"`
	DetailedMetric bool         `yaml:"detailed_metric"`
	ValueToMetric  bool         `yaml:"value_to_metric"`
	ShareThreshold bool         `yaml:"share_threshold"`
	Metadata       *yaml.Node   `yaml:"metadata"` // for Envoy's dynamic metadata, which sluice does not send
	Name           string       `yaml:"name"`
}

type rateLimitYAML struct {
	Unit            string        `yaml:"unit"`
	UnitMultiplier  *int64        `yaml:"unit_multiplier"` // the period in units, 1 by default
	RequestsPerUnit *int64        `yaml:"requests_per_unit"`
	Unlimited       bool          `yaml:"unlimited"`
	Name            string        `yaml:"name"`
	Replaces        []replaceYAML `yaml:"replaces"`
	Algorithm       string        `yaml:"algorithm"` // sluice: the algorithm, default the fixed window
	Burst           int64         `yaml:"burst"`     // sluice: the burst
	// sluice: "all" records every hit, over the limit or not (as
	// envoyproxy/ratelimit counts), so that hits sent once the answer is
	// known (apply_on_stream_done) are charged; "admitted", the default,
	// only what was allowed.
	Count string `yaml:"count"`
}

type replaceYAML struct {
	Name string `yaml:"name"`
}

// Unit returns the period of an envoyproxy/ratelimit unit (second,
// minute, hour, day, week, month, year, any case), and whether it is one.
func Unit(name string) (time.Duration, bool) {
	p, ok := units[strings.ToLower(name)]
	return p, ok
}

// Units returns the period of n units of length unit (Envoy's
// unit_multiplier), or why there is none: n is 1 or more, and the period
// at most sluice.MaxSpan.
func Units(unit time.Duration, n int64) (time.Duration, error) {
	switch {
	case n < 1:
		return 0, fmt.Errorf("%d: want 1 or more", n)
	case n > int64(sluice.MaxSpan/unit):
		return 0, fmt.Errorf("%d: a period past %v", n, sluice.MaxSpan)
	}
	return time.Duration(n) * unit, nil
}

func (c *checker) domain(n *yaml.Node, field string) *Domain {
	var y domainYAML
	c.decodeInto(n, field, &y)
	d := &Domain{Name: y.Domain}
	if d.Name == "" {
		c.add(n, join(field, "domain"), "required")
		return nil
	}
	d.Descriptors = c.descriptors(y.Descriptors, join(field, "descriptors"), d.Name)
	return d
}

func (c *checker) descriptors(nodes []*yaml.Node, field, parent string) []*Descriptor {
	var out []*Descriptor
	seen := map[string]bool{}
	for i, dn := range nodes {
		f := fmt.Sprintf("%s[%d]", field, i)
		var y descriptorYAML
		m := c.decodeInto(dn, f, &y)
		d := &Descriptor{Key: y.Key, Value: y.Value, Shadow: y.ShadowMode, QuotaMode: y.QuotaMode,
			ShareThreshold: y.ShareThreshold, DetailedMetric: y.DetailedMetric, ValueToMetric: y.ValueToMetric}
		d.FullKey = parent + "." + d.Key
		if d.Value != "" {
			d.FullKey += "_" + d.Value
		}
		if strings.Contains(d.Value, "*") {
			d.parts = strings.Split(d.Value, "*")
		} else if d.ShareThreshold {
			c.add(cmp.Or(m["share_threshold"], dn), f+".share_threshold", "only for a value with a wildcard (*): values that match it share one counter")
		}
		if y.Metadata != nil && y.Metadata.Kind != yaml.MappingNode {
			c.add(y.Metadata, f+".metadata", "want a mapping")
		}
		switch {
		case d.Key == "":
			c.add(dn, f+".key", "required")
		case strings.ContainsFunc(d.Key, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '=' }):
			// A counter is named by its entries as key=value, NUL between.
			c.add(dn, f+".key", "%q holds '=' or a control character", d.Key)
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
		d.Children = c.descriptors(y.Descriptors, f+".descriptors", d.FullKey)
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
	r := RateLimit{Name: y.Name, Unit: strings.ToLower(y.Unit), Units: 1}
	period, ok := units[r.Unit]
	if !ok {
		c.add(cmp.Or(m["unit"], n), field+".unit", "%q: want second, minute, hour, day, week, month or year", r.Unit)
	}
	if y.UnitMultiplier != nil && ok {
		p, err := Units(period, *y.UnitMultiplier)
		if err != nil {
			c.add(cmp.Or(m["unit_multiplier"], n), field+".unit_multiplier", "%v", err)
			ok = false
		} else {
			period, r.Units = p, uint32(*y.UnitMultiplier)
		}
	}
	if y.RequestsPerUnit == nil {
		c.add(n, field+".requests_per_unit", "required (or unlimited: true)")
	} else {
		r.Rate = *y.RequestsPerUnit
	}
	// A fixed window aligned to the unit, as envoyproxy/ratelimit counts,
	// unless the algorithm extension names another.
	r.Limit = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: r.Rate, Period: period, Burst: y.Burst}
	if r.Rate == 0 && y.RequestsPerUnit != nil {
		r.Block, r.Limit.Rate = true, 1 // never asked of a store: every request is over
	}
	if y.Algorithm != "" {
		a, err := sluice.ParseAlgorithm(y.Algorithm)
		if err != nil {
			c.add(cmp.Or(m["algorithm"], n), field+".algorithm", "%v", strings.TrimPrefix(err.Error(), "sluice: "))
		}
		r.Limit.Algorithm = a
	}
	switch y.Count {
	case "", "admitted":
	case "all":
		r.Limit.CountAll = true
	default:
		c.add(cmp.Or(m["count"], n), field+".count", "%q: want all or admitted", y.Count)
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
// does: at each level an entry matches a node with its key and value, else
// the first node (in file order) whose value's wildcards match it, else a
// node with its key and no value (any value). It returns the node the
// entries end at, or nil when they leave the tree, and, when an entry
// matched a share_threshold node, the value each entry counts under: its
// own, or that node's wildcard (nil otherwise: each counts under its own).
func (d *Domain) Match(entries []Entry) (*Descriptor, []string) {
	level := d.Descriptors
	var node *Descriptor
	var values []string
	for i, e := range entries {
		node = nil
		var wild, any *Descriptor
		for _, n := range level {
			switch {
			case n.Key != e.Key:
			case n.Value == e.Value:
				node = n
			case n.parts != nil && wild == nil && wildcardMatch(n.parts, e.Value):
				wild = n
			case n.Value == "":
				any = n
			}
		}
		switch {
		case node != nil:
		case wild != nil:
			node = wild
			if wild.ShareThreshold {
				if values == nil {
					values = make([]string, len(entries))
					for j := range entries {
						values[j] = entries[j].Value
					}
				}
				values[i] = wild.Value
			}
		default:
			node = any
		}
		if node == nil {
			return nil, nil
		}
		level = node.Children
	}
	return node, values
}

// wildcardMatch reports whether value matches a value pattern split on its
// wildcards: it starts with the first part, ends with the last, and holds
// the others in order between; each "*" matches any run, empty included.
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) || !strings.HasSuffix(value[len(first):], last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}
