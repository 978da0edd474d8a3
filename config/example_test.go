package config_test

import (
	"fmt"

	"github.com/sluicehq/sluice/config"
)

// Parse reports every problem of a file at once, each at its line and
// column, in the file's own terms.
func ExampleParse() {
	_, err := config.Parse("sluice.yaml", []byte(`store:
  timeout: fast
policies:
  - name: api
    limit: 10/fortnight
`))
	fmt.Println(err)
	// Output:
	// sluice.yaml:2:12: store.timeout: "fast" is not a duration: want a number and a unit, such as 250ms, 1s or 5m
	// sluice.yaml:5:12: policies[0].limit: invalid limit: "10/fortnight": period "fortnight": want a count and a unit (us, ms, s, m, h, d), such as 1m
}
