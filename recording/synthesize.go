package recording

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/rubyperf/rubyperf/debuginfo"
	"github.com/rubyperf/rubyperf/perfdata"
	"github.com/rubyperf/rubyperf/rubystack"
)

// maxThreadsSynth bounds the threads described for one process.
const maxThreadsSynth = 1 << 14

// synthesize describes an existing process in the file: a COMM for each of
// its threads and an MMAP2 for each executable mapping, at time 0 so they
// precede every sample. Later changes come from the kernel's tracking
// records. It also notes the build-ids of the mapped files.
//
// Non-executable file mappings are described too: DWARF unwinding reads a
// library's .eh_frame_hdr, which lives in a read-only segment.
func (s *session) synthesize(pid int) error {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return rubystack.ProcError(pid, err)
	}
	if len(tasks) > maxThreadsSynth {
		tasks = tasks[:maxThreadsSynth]
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
		if err != nil {
			continue // the thread exited meanwhile
		}
		rec := &perfdata.Comm{Pid: uint32(pid), Tid: uint32(tid), Comm: strings.TrimSpace(string(comm)),
			Trailer: perfdata.Trailer{Pid: uint32(pid), Tid: uint32(tid)}}
		if err := s.w.Synthesize(0, rec); err != nil {
			return fmt.Errorf("%s: %w", s.opts.Output, err)
		}
	}
	maps, err := rubystack.ReadMaps(pid)
	if err != nil {
		return err
	}
	for _, m := range maps {
		exec := strings.Contains(m.Perms, "x")
		name := m.Path
		switch {
		case strings.HasPrefix(name, "/"):
		case exec && (name == "" || strings.HasPrefix(name, "[anon:")):
			// JIT code (YJIT's region is a nameless r-x mapping), as perf
			// record names it; perf reads /tmp/perf-PID.map for these.
			name = "//anon"
		case exec && strings.HasPrefix(name, "["):
		default:
			continue // anonymous data, heap, stack
		}
		var prot uint32
		for c, p := range map[byte]uint32{'r': unix.PROT_READ, 'w': unix.PROT_WRITE, 'x': unix.PROT_EXEC} {
			if strings.IndexByte(m.Perms, c) >= 0 {
				prot |= p
			}
		}
		misc := perfdata.MiscUser
		if !exec {
			misc |= perfdata.MiscMmapData
		}
		rec := &perfdata.Mmap2{Misc: misc, Pid: uint32(pid), Tid: uint32(pid), Addr: m.Start,
			Len: m.End - m.Start, Pgoff: m.Offset, Prot: prot, Flags: unix.MAP_PRIVATE, Filename: name,
			Trailer: perfdata.Trailer{Pid: uint32(pid), Tid: uint32(pid)}}
		if err := s.w.Synthesize(0, rec); err != nil {
			return fmt.Errorf("%s: %w", s.opts.Output, err)
		}
		if exec && strings.HasPrefix(name, "/") && s.live == nil { // for the file's header
			s.noteBuildID(pid, m)
		}
	}
	return nil
}

// noteBuildID remembers the build-id of a mapped file for HEADER_BUILD_ID.
func (s *session) noteBuildID(pid int, m rubystack.Mapping) {
	if s.buildIDs == nil {
		s.buildIDs = map[string][]byte{}
	}
	if _, ok := s.buildIDs[m.Path]; ok {
		return
	}
	s.buildIDs[m.Path] = nil
	for _, p := range []string{
		fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End),
		filepath.Join(fmt.Sprintf("/proc/%d/root", pid), m.Path),
	} {
		if id, err := debuginfo.BuildIDOf(p); err == nil && id != "" {
			b, _ := hex.DecodeString(id)
			s.buildIDs[m.Path] = b
			return
		}
	}
}

// describeHost fills the features perf shows in --header.
func (s *session) describeHost() {
	var u unix.Utsname
	unix.Uname(&u)
	if h, err := os.Hostname(); err == nil {
		s.w.SetFeature(perfdata.FeatHostname, perfdata.EncodeString(h))
	}
	s.w.SetFeature(perfdata.FeatOSRelease, perfdata.EncodeString(unix.ByteSliceToString(u.Release[:])))
	s.w.SetFeature(perfdata.FeatVersion, perfdata.EncodeString("rubyperf"))
	s.w.SetFeature(perfdata.FeatArch, perfdata.EncodeString(unix.ByteSliceToString(u.Machine[:])))
	n := uint32(runtime.NumCPU())
	s.w.SetFeature(perfdata.FeatNRCPUs, perfdata.EncodeNRCPUs(perfdata.NRCPUs{Available: n, Online: n}))
	s.w.SetFeature(perfdata.FeatCmdline, perfdata.EncodeStrings(os.Args))
	var ids []perfdata.BuildID
	for path, id := range s.buildIDs {
		if len(id) > 0 {
			ids = append(ids, perfdata.BuildID{Misc: perfdata.MiscUser, Pid: -1, ID: id, Filename: path})
		}
	}
	if len(ids) > 0 {
		if b, err := perfdata.EncodeBuildIDs(ids); err == nil {
			s.w.SetFeature(perfdata.FeatBuildID, b)
		}
	}
}

// maxKallsymsScan bounds the lines of /proc/kallsyms read to find _text.
const maxKallsymsScan = 1 << 22

// synthesizeKernel describes the kernel's text as perf record does
// (perf_event__synthesize_kernel_mmap): an MMAP of "[kernel.kallsyms]_text"
// for pid -1 from _text to the end of the address space, so perf names
// kernel frames from kallsyms.
func (s *session) synthesizeKernel() error {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil // no kernel symbols to offer: kernel frames stay unnamed
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan() && n < maxKallsymsScan; n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != "_text" {
			continue
		}
		addr, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil || addr == 0 {
			return nil // addresses hidden (kptr_restrict)
		}
		rec := &perfdata.Mmap{Misc: perfdata.MiscKernel, Pid: ^uint32(0), Addr: addr, Len: ^uint64(0) - addr,
			Pgoff: addr, Filename: "[kernel.kallsyms]_text", Trailer: perfdata.Trailer{Pid: ^uint32(0)}}
		return s.w.Synthesize(0, rec)
	}
	return nil
}
