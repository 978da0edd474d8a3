package clientip_test

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/clientip"
)

// Behind a load balancer in 10.0.0.0/8, the client is the rightmost
// address of X-Forwarded-For that is not one of yours: never the leftmost,
// which any client can write.
func ExampleRightmostUntrusted() {
	r, err := clientip.RightmostUntrusted("X-Forwarded-For", []string{"10.0.0.0/8"}, clientip.Options{})
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequest("GET", "http://example.com/", nil)
	req.RemoteAddr = "10.0.0.7:41234" // the load balancer
	req.Header.Set("X-Forwarded-For", "6.6.6.6, 203.0.113.9, 10.1.2.3")
	key, _ := r.Key(req)
	fmt.Println(key)
	// Output: 203.0.113.9
}
