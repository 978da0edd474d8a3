module github.com/sluicehq/sluice

go 1.26

require (
	github.com/redis/rueidis v1.0.79
	pgregory.net/rapid v1.3.0
)

require (
	github.com/realclientip/realclientip-go v1.0.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
