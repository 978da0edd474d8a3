package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
)

// The file is decoded into the unexported *YAML structs below by their
// `yaml` tags, each field's name written once, in its tag. decodeInto
// walks the YAML nodes itself rather than calling yaml.v3's decoder, so
// that every problem, an unknown field as much as a bad duration, carries
// its file:line:column and a message in the file's own terms, and so that
// one pass reports them all.

var (
	durationType = reflect.TypeFor[time.Duration]()
	bytesType    = reflect.TypeFor[byteSize]()
	limitType    = reflect.TypeFor[sluice.Limit]()
	costType     = reflect.TypeFor[costYAML]()
	failModeType = reflect.TypeFor[sluice.FailMode]()
	nodeType     = reflect.TypeFor[*yaml.Node]()
)

// decodeInto decodes n into the struct v points to, by v's yaml tags,
// reporting unknown and repeated keys, and returns the value node of each
// key present, for later checks to point at.
func (c *checker) decodeInto(n *yaml.Node, field string, v any) map[string]*yaml.Node {
	rv := reflect.ValueOf(v).Elem()
	t := rv.Type()
	names := make([]string, 0, t.NumField())
	index := map[string]int{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		names = append(names, name)
		index[name] = i
	}
	m := c.mapping(n, field, names...)
	for name, vn := range m {
		c.value(vn, join(field, name), rv.Field(index[name]))
	}
	return m
}

// value decodes n into v, by v's type.
func (c *checker) value(n *yaml.Node, field string, v reflect.Value) {
	if v.Type() == nodeType {
		v.Set(reflect.ValueOf(n))
		return
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // "key:" with nothing after it: the default
	}
	switch v.Type() {
	case durationType:
		if s, ok := c.scalar(n, field); ok {
			d, err := time.ParseDuration(s)
			if err != nil {
				c.add(n, field, "%q is not a duration: want a number and a unit, such as 250ms, 1s or 5m", s)
				return
			}
			v.SetInt(int64(d))
		}
		return
	case bytesType:
		if s, ok := c.scalar(n, field); ok {
			b, err := parseBytes(s)
			if err != nil {
				c.add(n, field, "%q is not a size: want bytes, or a number and a unit, such as 512MiB or 2GB", s)
				return
			}
			v.SetInt(b)
		}
		return
	case limitType:
		v.Set(reflect.ValueOf(c.limit(n, field)))
		return
	case costType:
		cost := costYAML{Estimate: 1}
		if n.Kind == yaml.MappingNode {
			c.decodeInto(n, field, &cost)
			if cost.From == "" {
				c.add(n, field+".from", "required in the mapping form: header:NAME, bytes or json:PATH; a cost that the answer does not settle is a number")
			}
		} else if s, ok := c.scalar(n, field); ok {
			i, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				c.add(n, field, "%q: want a whole number, or {estimate, from}", s)
				return
			}
			cost.Estimate = i
		}
		v.Set(reflect.ValueOf(cost))
		return
	case failModeType:
		if s, ok := c.scalar(n, field); ok {
			m, err := sluice.ParseFailMode(s)
			if err != nil {
				c.add(n, field, "%q: want local, open or closed", s)
			}
			v.Set(reflect.ValueOf(m))
		}
		return
	}
	switch v.Kind() {
	case reflect.String:
		if s, ok := c.scalar(n, field); ok {
			v.SetString(s)
		}
	case reflect.Int, reflect.Int64:
		if s, ok := c.scalar(n, field); ok {
			i, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				c.add(n, field, "%q: want a whole number", s)
				return
			}
			v.SetInt(i)
		}
	case reflect.Float64:
		if s, ok := c.scalar(n, field); ok {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				c.add(n, field, "%q: want a number", s)
				return
			}
			v.SetFloat(f)
		}
	case reflect.Bool:
		if s, ok := c.scalar(n, field); ok {
			b, err := strconv.ParseBool(s)
			if err != nil {
				c.add(n, field, "%q: want true or false", s)
				return
			}
			v.SetBool(b)
		}
	case reflect.Slice:
		items := c.sequence(n, field)
		s := reflect.MakeSlice(v.Type(), len(items), len(items))
		for i, item := range items {
			c.value(item, fmt.Sprintf("%s[%d]", field, i), s.Index(i))
		}
		v.Set(s)
	case reflect.Struct:
		c.decodeInto(n, field, v.Addr().Interface())
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		c.value(n, field, p.Elem())
		v.Set(p)
	default:
		panic("config: no decoder for " + v.Type().String())
	}
}

// scalar returns a scalar node's value, reporting any other node.
func (c *checker) scalar(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		c.add(n, field, "want a single value, not a %s", kindName(n.Kind))
		return "", false
	}
	return n.Value, true
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}

// byteSize is a size in bytes, written as a number of bytes or with a unit:
// KB, MB, GB (powers of 1000) or KiB, MiB, GiB (of 1024).
type byteSize int64

var byteUnits = []struct {
	suffix string
	scale  int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	scale := int64(1)
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, scale = strings.TrimSpace(n), u.scale
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/scale {
		return 0, fmt.Errorf("config: bad size %q", s)
	}
	return n * scale, nil
}
