module github.com/rubyperf/rubyperf

go 1.26.8

require (
	github.com/chromedp/cdproto v0.159.0
	github.com/chromedp/chromedp v0.23.0
	github.com/cilium/ebpf v0.22.0
	github.com/elastic/go-perf v0.0.0-20260224073651-af0ee0c731b7
	github.com/go-delve/delve v1.27.2
	github.com/google/pprof v0.0.0-20260906184651-6331bc6350fe
	github.com/klauspost/compress v1.18.0
	golang.org/x/arch v0.32.0
	golang.org/x/sys v0.49.0
)

require github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect

tool github.com/cilium/ebpf/cmd/bpf2go
