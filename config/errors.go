package config

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong with a file, at a line and column.
type Problem struct {
	File         string
	Line, Column int
	Field        string // the path to the field, such as policies[2].limit
	Msg          string
}

func (p Problem) Error() string {
	field := ""
	if p.Field != "" {
		field = p.Field + ": "
	}
	return fmt.Sprintf("%s:%d:%d: %s%s", p.File, p.Line, p.Column, field, p.Msg)
}

// Problems is every problem found in a file; Validate and Parse report
// them all at once.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// checker collects problems while a file is read.
type checker struct {
	file     string
	problems Problems
}

func (c *checker) add(n *yaml.Node, field, format string, args ...any) {
	line, col := 0, 0
	if n != nil {
		line, col = n.Line, n.Column
	}
	c.problems = append(c.problems, Problem{File: c.file, Line: line, Column: col, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// mapping returns n's keys and values by key, reporting a problem for a
// node that is not a mapping, for a duplicate key, and for keys not in
// allowed.
func (c *checker) mapping(n *yaml.Node, field string, allowed ...string) map[string]*yaml.Node {
	out := map[string]*yaml.Node{}
	if n == nil {
		return out
	}
	if n.Kind != yaml.MappingNode {
		c.add(n, field, "want a mapping")
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := k.Value
		if !slices.Contains(allowed, name) {
			c.add(k, join(field, name), "unknown field (want one of %s)", strings.Join(allowed, ", "))
			continue
		}
		if _, dup := out[name]; dup {
			c.add(k, join(field, name), "repeated field")
			continue
		}
		out[name] = v
	}
	return out
}

// sequence returns n's items, reporting a node that is not a sequence.
func (c *checker) sequence(n *yaml.Node, field string) []*yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		c.add(n, field, "want a list")
		return nil
	}
	return n.Content
}

func join(field, name string) string {
	if field == "" {
		return name
	}
	return field + "." + name
}
