// Package shardv1 is the generated code of the shard peer protocol
// (shard.proto). Regenerate with go generate ./api/shardv1 (needs protoc,
// protoc-gen-go and protoc-gen-go-grpc); the generated files are committed.
package shardv1

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative shard.proto
