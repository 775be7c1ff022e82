// Command otelcol-rubyperf is the OpenTelemetry Collector that rubyperf's
// tests run (through internal/otelcoltest) to receive the OTLP profiles our
// agent sends: a real collector, with the otlp receiver and the debug and
// otlp (gRPC, to forward to a backend) exporters of the upstream project,
// plus one exporter of our own,
// profilefile, which records exactly what the collector accepted so that a
// test can read it back.
//
// profilefile (config: path: FILE) appends every profiles batch it consumes
// to FILE as one record: a 4-byte big-endian length, then the OTLP
// ExportProfilesServiceRequest protobuf bytes. It syncs the file before
// returning, so once the receiver has answered a sender, the batch is on
// disk even if the collector is killed right after. Beside it, FILE.metadata
// gets a JSON line per batch: the request's metadata (its headers, with the
// receiver's include_metadata), so a test can see what a sender sent.
//
// This is a separate module (testdata is outside the main module), so the
// collector's many dependencies stay out of rubyperf's own go.mod.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log"
	"os"
	"sync"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol-rubyperf", Description: "rubyperf test collector", Version: "test"},
		Factories: factories,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory()},
				DefaultScheme:     "file",
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatal(err)
	}
}

func factories() (otelcol.Factories, error) {
	receivers, err := otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	exporters, err := otelcol.MakeFactoryMap[exporter.Factory](debugexporter.NewFactory(), otlpexporter.NewFactory(), newProfileFileFactory())
	if err != nil {
		return otelcol.Factories{}, err
	}
	return otelcol.Factories{
		Receivers: receivers,
		Exporters: exporters,
		Telemetry: otelconftelemetry.NewFactory(),
	}, nil
}

// profileFileConfig is the profilefile exporter's configuration.
type profileFileConfig struct {
	Path string `mapstructure:"path"`
}

func (c *profileFileConfig) Validate() error {
	if c.Path == "" {
		return errors.New("path is required")
	}
	return nil
}

func newProfileFileFactory() exporter.Factory {
	return xexporter.NewFactory(component.MustNewType("profilefile"),
		func() component.Config { return &profileFileConfig{} },
		xexporter.WithProfiles(createProfileFile, component.StabilityLevelDevelopment))
}

func createProfileFile(ctx context.Context, set exporter.Settings, cfg component.Config) (xexporter.Profiles, error) {
	pf := &profileFile{path: cfg.(*profileFileConfig).Path}
	// No queue and no retry: ConsumeProfiles returns only once the record
	// is synced, so the receiver answers the sender after that.
	return xexporterhelper.NewProfiles(ctx, set, cfg, pf.consume,
		exporterhelper.WithStart(pf.start),
		exporterhelper.WithShutdown(pf.shutdown),
		// Marshalling rewrites attribute strings into dictionary references
		// in place: ask the pipeline for a copy of our own.
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: true}))
}

// profileFile is the profilefile exporter: one open file, appended to.
type profileFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
	md   *os.File // FILE.metadata
}

func (p *profileFile) start(context.Context, component.Host) error {
	f, err := os.OpenFile(p.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	p.f = f
	p.md, err = os.OpenFile(p.path+".metadata", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	return err
}

func (p *profileFile) shutdown(context.Context) error {
	if p.md != nil {
		p.md.Close()
	}
	if p.f == nil {
		return nil
	}
	return p.f.Close()
}

// consume writes one record (length, then the request) in a single write
// and syncs it.
func (p *profileFile) consume(ctx context.Context, pd pprofile.Profiles) error {
	info := client.FromContext(ctx)
	md := map[string][]string{}
	for k := range info.Metadata.Keys() {
		md[k] = info.Metadata.Get(k)
	}
	line, err := json.Marshal(md)
	if err != nil {
		return err
	}
	body, err := pprofileotlp.NewExportRequestFromProfiles(pd).MarshalProto()
	if err != nil {
		return err
	}
	rec := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	rec = append(rec, body...)
	p.mu.Lock()
	defer p.mu.Unlock()
	// The metadata first: a batch in FILE has its line in FILE.metadata.
	if _, err := p.md.Write(append(line, '\n')); err != nil {
		return err
	}
	if _, err := p.f.Write(rec); err != nil {
		return err
	}
	return p.f.Sync()
}
