package config

import (
	"net/url"

	"gopkg.in/yaml.v3"
)

// redacted replaces a secret's value.
const redacted = "REDACTED"

// Redact returns the policy file source with its secrets replaced by
// REDACTED: the value of every field named token or password, and the
// passwords of every URL (a Redis URL's redis://user:password@host, and
// its sentinel_password parameter). The
// rest, comments included, is kept. A source that does not parse is
// returned as REDACTED whole: it cannot be shown safely.
func Redact(source []byte) []byte {
	var root yaml.Node
	if err := yaml.Unmarshal(source, &root); err != nil {
		return []byte(redacted + "\n")
	}
	redactNode(&root)
	out, err := yaml.Marshal(&root)
	if err != nil {
		return []byte(redacted + "\n")
	}
	return out
}

func redactNode(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			switch {
			case v.Kind == yaml.ScalarNode && (k.Value == "token" || k.Value == "password"):
				v.Value, v.Tag, v.Style = redacted, "!!str", 0
			case v.Kind == yaml.ScalarNode && k.Value == "url":
				v.Value = redactURL(v.Value)
			default:
				redactNode(v)
			}
		}
		return
	}
	for _, c := range n.Content {
		redactNode(c)
	}
}

// redactURL replaces the passwords of a URL (its user's, and a
// sentinel_password parameter), or the whole value when it does not parse
// as one.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return redacted
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	if q := u.Query(); q.Has("sentinel_password") {
		q.Set("sentinel_password", redacted)
		u.RawQuery = q.Encode()
	}
	return u.String()
}
