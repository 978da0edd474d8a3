// Package sluicev1 is the generated code of the native gRPC check service
// (check.proto). Regenerate with go generate ./api/sluicev1 (needs protoc,
// protoc-gen-go and protoc-gen-go-grpc); the generated files are committed.
package sluicev1

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative check.proto
