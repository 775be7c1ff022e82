module github.com/rubyperf/rubyperf

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0 // indirect
	github.com/elastic/go-perf v0.0.0-20260224073651-af0ee0c731b7 // indirect
	golang.org/x/arch v0.32.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

tool github.com/cilium/ebpf/cmd/bpf2go
