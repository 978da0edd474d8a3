package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s
}

// yamlToJSONValue decodes YAML into the values JSON Schema validates.
func yamlToJSONValue(t *testing.T, src []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(src, &v); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The schema accepts the embedded default, the docs' examples and the
// Envoy compatibility configs, and refuses an unknown field.
func TestSchemaValidatesFiles(t *testing.T) {
	s := compileSchema(t)
	files := map[string][]byte{"default.yaml": defaultYAML}
	envoy, _ := filepath.Glob("../internal/server/testdata/envoy/config/*.yaml")
	for _, f := range envoy {
		data, _ := os.ReadFile(f)
		files[f] = data
	}
	fence := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	for _, f := range []string{"../docs/config.md", "../docs/distributed.md", "../docs/envoy.md"} {
		data, _ := os.ReadFile(f)
		for i, m := range fence.FindAllSubmatch(data, -1) {
			files[f+"#"+string(rune('1'+i))] = m[1]
		}
	}
	for name, src := range files {
		if err := s.Validate(yamlToJSONValue(t, src)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if s.Validate(yamlToJSONValue(t, []byte("store: {type: memory, colour: blue}\npolicies: [{name: a, limit: 1/s}]"))) == nil {
		t.Error("an unknown field passes the schema")
	}
}

// Every field Parse reads is in the schema, where Parse reads it, and the
// schema has no field Parse does not read: the two cannot drift apart.
func TestSchemaMatchesTheDecoder(t *testing.T) {
	var schema struct {
		Defs map[string]struct {
			Properties map[string]json.RawMessage
			OneOf      []struct{ Properties map[string]json.RawMessage }
		} `json:"$defs"`
	}
	if err := json.Unmarshal(Schema(), &schema); err != nil {
		t.Fatal(err)
	}
	props := func(def string) map[string]json.RawMessage {
		d := schema.Defs[def]
		if d.Properties != nil {
			return d.Properties
		}
		for _, o := range d.OneOf {
			if o.Properties != nil {
				return o.Properties
			}
		}
		return nil
	}
	for def, typ := range map[string]any{
		"file": fileYAML{}, "store": storeYAML{}, "listeners": listenersYAML{}, "envoy": envoyYAML{},
		"metrics": metricsYAML{}, "ui": uiYAML{}, "admin": adminYAML{}, "policy": policyYAML{}, "limit": limitYAML{},
		"domain": domainYAML{}, "descriptor": descriptorYAML{}, "rateLimit": rateLimitYAML{},
	} {
		want := map[string]bool{}
		rt := reflect.TypeOf(typ)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				want[name] = true
			}
		}
		got := props(def)
		for name := range want {
			if _, ok := got[name]; !ok {
				t.Errorf("$defs.%s lacks %q, which Parse reads", def, name)
			}
		}
		for name := range got {
			if !want[name] && !(def == "store" && slices.Contains(storeTypes, name)) { // read by hoistStoreSection
				t.Errorf("$defs.%s has %q, which Parse does not read", def, name)
			}
		}
	}
}
